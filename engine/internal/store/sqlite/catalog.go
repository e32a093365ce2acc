package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
)

// The workflow_versions table keeps the engine's workflow catalog.
var _ store.Catalog = (*Store)(nil)

// SaveWorkflow implements store.Catalog in one transaction.
func (s *Store) SaveWorkflow(ctx context.Context, w store.WorkflowVersion) (store.WorkflowVersion, error) {
	if err := s.checkWrite(); err != nil {
		return store.WorkflowVersion{}, err
	}
	fail := func(err error) (store.WorkflowVersion, error) {
		return store.WorkflowVersion{}, s.fault(fmt.Errorf("saving workflow %s: %w", w.Name, err))
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = tx.Rollback() }()
	err = tx.QueryRowContext(ctx, `SELECT version FROM workflow_versions WHERE name = ? AND spec_hash = ?`,
		w.Name, w.SpecHash).Scan(&w.Version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM workflow_versions WHERE name = ?`,
			w.Name).Scan(&w.Version); err != nil {
			return fail(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO workflow_versions (name, version, spec_hash, spec, description, registered_at)
			VALUES (?, ?, ?, ?, ?, ?)`, w.Name, w.Version, w.SpecHash, string(w.Spec), w.Description, nanos(w.RegisteredAt)); err != nil {
			return fail(err)
		}
	case err != nil:
		return fail(err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE workflow_versions SET current = (version = ?),
		registered_at = CASE WHEN version = ? THEN ? ELSE registered_at END WHERE name = ?`,
		w.Version, w.Version, nanos(w.RegisteredAt), w.Name); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	w.Current = true
	return w, nil
}

// RemoveWorkflow implements store.Catalog.
func (s *Store) RemoveWorkflow(ctx context.Context, name string) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	res, err := s.w.ExecContext(ctx, `UPDATE workflow_versions SET current = 0 WHERE name = ? AND current = 1`, name)
	if err != nil {
		return false, s.fault(fmt.Errorf("removing workflow %s: %w", name, err))
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// WorkflowVersions implements store.Catalog.
func (s *Store) WorkflowVersions(ctx context.Context, name string) ([]store.WorkflowVersion, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT name, version, spec_hash, spec, description, registered_at, current FROM workflow_versions`
	var args []any
	if name != "" {
		q += ` WHERE name = ?`
		args = append(args, name)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY name, version DESC`, args...)
	if err != nil {
		return nil, s.fault(fmt.Errorf("reading the workflow catalog: %w", err))
	}
	defer rows.Close()
	var out []store.WorkflowVersion
	for rows.Next() {
		var w store.WorkflowVersion
		var text string
		var at int64
		if err := rows.Scan(&w.Name, &w.Version, &w.SpecHash, &text, &w.Description, &at, &w.Current); err != nil {
			return nil, fmt.Errorf("reading the workflow catalog: %w", err)
		}
		w.Spec, w.RegisteredAt = []byte(text), sqlrow.FromNanos(at)
		out = append(out, w)
	}
	return out, rows.Err()
}
