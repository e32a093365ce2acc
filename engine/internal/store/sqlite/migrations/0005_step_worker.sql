-- The pool worker that ran a step's last attempt, "POOL/PID" (docs/guide/pools.md); NULL when the
-- step did not run on a pool worker (and for every row written before this migration).
ALTER TABLE workflow_steps ADD COLUMN worker TEXT;
