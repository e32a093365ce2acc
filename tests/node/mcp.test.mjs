// Interop: dcc-flow's MCP server (tests/mcpdemo) with the official TypeScript SDK client, over
// streamable HTTP and over stdio. Run with `node --test tests/node/` after `npm ci`.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
let bin;

before(() => {
  bin = join(mkdtempSync(join(tmpdir(), 'mcpdemo-')), 'mcpdemo');
  const built = spawnSync('go', ['build', '-o', bin, './tests/mcpdemo'], { cwd: root, stdio: 'inherit' });
  assert.equal(built.status, 0, 'go build ./tests/mcpdemo failed');
});

async function exercise(client, { expectProgress }) {
  const updates = [];
  client.fallbackNotificationHandler = async (n) => {
    if (n.method === 'notifications/$/dcc.workflowUpdated') updates.push(n.params);
  };
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ['workflows_approve', 'workflows_cancel', 'workflows_get_status',
    'workflows_lookup', 'workflows_resume', 'workflows_run']);
  const run = tools.find((t) => t.name === 'workflows_run');
  assert.equal(run.annotations.destructiveHint, true);
  assert.equal(run.annotations.openWorldHint, true);

  // A one-step spec, waited for, with progress.
  const progress = [];
  const res = await client.callTool(
    { name: 'workflows_run', arguments: { spec: 'steps: [{id: a, tool: flow__echo, args: {value: 7}}]', wait_secs: 20 } },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  assert.equal(res.isError ?? false, false, JSON.stringify(res));
  assert.equal(res.structuredContent.status, 'completed');
  assert.deepEqual(res.structuredContent.outputs.a, { value: 7 });
  // Over HTTP the notifications travel on the request's own SSE stream, before its response. Over
  // stdio mcp-go writes notifications from another goroutine than responses, so the response can
  // arrive first and the SDK then drops progress for the finished request: only updates are
  // required there (they are not tied to a request).
  if (expectProgress) assert.ok(progress.length > 0, 'no progress notifications');
  for (let i = 0; i < 100 && !updates.some((u) => u.terminal === true); i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(updates.some((u) => u.terminal === true && u.detail.kind === 'workflow_terminal'), JSON.stringify(updates));

  // The catalog workflow with an approval, approved over MCP.
  const started = await client.callTool({ name: 'workflows_run', arguments: { workflow: 'gated', inputs: { shot: 'sh010' } } });
  const id = started.structuredContent.workflow_id;
  let status;
  for (let i = 0; i < 200; i++) {
    status = (await client.callTool({ name: 'workflows_get_status', arguments: { workflow_id: id } })).structuredContent;
    if (status.status === 'waiting') break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(status.status, 'waiting');
  const approved = await client.callTool({ name: 'workflows_approve', arguments: { workflow_id: id, step: 'human_gate', approved: true } });
  assert.equal(approved.isError ?? false, false, JSON.stringify(approved));
  for (let i = 0; i < 200; i++) {
    status = (await client.callTool({ name: 'workflows_get_status', arguments: { workflow_id: id } })).structuredContent;
    if (status.terminal) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(status.status, 'completed');

  // The run resource.
  const resource = await client.readResource({ uri: `dccflow://runs/${id}` });
  const doc = JSON.parse(resource.contents[0].text);
  assert.equal(doc.run.status, 'completed');

  // A tool error carries the stable code.
  const bad = await client.callTool({ name: 'workflows_get_status', arguments: { workflow_id: 'nope' } });
  assert.equal(bad.isError, true);
  assert.equal(bad.structuredContent.code, 'not_found');
}

test('streamable HTTP', async () => {
  const proc = spawn(bin, ['-http', '127.0.0.1:0'], { stdio: ['pipe', 'pipe', 'inherit'] });
  try {
    const url = await new Promise((resolve, reject) => {
      createInterface({ input: proc.stdout }).once('line', resolve);
      proc.once('exit', (code) => reject(new Error(`mcpdemo exited with ${code}`)));
    });
    const client = new Client({ name: 'dcc-flow-node-interop', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      await exercise(client, { expectProgress: true });
    } finally {
      await client.close();
    }
  } finally {
    proc.stdin.end();
    proc.kill();
  }
});

test('stdio', async () => {
  const client = new Client({ name: 'dcc-flow-node-interop', version: '1.0.0' });
  await client.connect(new StdioClientTransport({ command: bin, args: [] }));
  try {
    await exercise(client, { expectProgress: false });
  } finally {
    await client.close();
  }
});

