// Interop: dcc-flow's MCP server (tests/mcpdemo) with the official TypeScript SDK client, over
// streamable HTTP and over stdio. Run with `node --test tests/node/` after `npm ci`.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, realpathSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
let bin;

before(() => {
  bin = join(mkdtempSync(join(tmpdir(), 'mcpdemo-')), 'mcpdemo');
  const built = spawnSync('go', ['build', '-o', bin, './tests/mcpdemo'], { cwd: root, stdio: 'inherit' });
  assert.equal(built.status, 0, 'go build ./tests/mcpdemo failed');
});

async function exercise(client, { lossyEnd }) {
  const updates = [];
  client.fallbackNotificationHandler = async (n) => {
    if (n.method === 'notifications/$/dcc.workflowUpdated') updates.push(n.params);
  };
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ['workflows_approve', 'workflows_cancel', 'workflows_get_status',
    'workflows_lookup', 'workflows_pause', 'workflows_resume', 'workflows_run', 'workflows_search',
    'workflows_unpause']);
  const run = tools.find((t) => t.name === 'workflows_run');
  assert.equal(run.annotations.destructiveHint, true);
  assert.equal(run.annotations.openWorldHint, true);

  // A two-step spec, waited for, with progress. Step b sleeps so that what is sent before it reaches
  // the client while the request is still open. Notifications sent as the run ends may not: mcp-go
  // (v1.2.1) hands a session's notifications to whichever of its streams takes them first (over
  // HTTP this POST's SSE stream or the client's standalone GET stream; over stdio another writer
  // goroutine than the response's), so they can arrive out of order and after the response (and
  // the SDK drops progress for a finished request). Over HTTP one taken by the request's stream
  // just as the request ends is dropped. The response carries the final state; docs/reference/mcp.md says so.
  const progress = [];
  const res = await client.callTool(
    { name: 'workflows_run', arguments: { spec: 'steps: [{id: a, tool: flow__echo, args: {value: 7}}, {id: b, tool: flow__sleep, args: {ms: 400}, depends_on: [a]}]', wait_secs: 20 } },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  assert.equal(res.isError ?? false, false, JSON.stringify(res));
  assert.equal(res.structuredContent.status, 'completed');
  assert.equal(res.structuredContent.terminal, true);
  assert.deepEqual(res.structuredContent.outputs.a, { value: 7 });
  assert.ok(progress.some((p) => p.total === 2 && p.progress >= 1 && /step_(exit a|enter b)/.test(p.message)), JSON.stringify(progress));
  assert.ok(updates.some((u) => u.detail.kind === 'step_enter' && u.detail.step_key === 'b' && u.progress.completed === 1), JSON.stringify(updates));
  if (!lossyEnd) {
    for (let i = 0; i < 250 && !updates.some((u) => u.terminal === true); i++) await sleep(20);
    assert.ok(updates.some((u) => u.terminal === true && u.detail.kind === 'workflow_terminal'), JSON.stringify(updates));
  }

  // The run just made, found by the tool one of its steps called (docs/reference/mcp.md, workflows_search).
  const found = await client.callTool({ name: 'workflows_search', arguments: { tool: 'flow__sleep', limit: 5 } });
  assert.equal(found.isError ?? false, false, JSON.stringify(found));
  assert.ok(found.structuredContent.runs.some((r) => r.run_id === res.structuredContent.run_id), JSON.stringify(found));

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

  await subscription(client);
  await assets(client);

  // A tool error carries the stable code.
  const bad = await client.callTool({ name: 'workflows_get_status', arguments: { workflow_id: 'nope' } });
  assert.equal(bad.isError, true);
  assert.equal(bad.structuredContent.code, 'not_found');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A file's lineage and the stale outputs (docs/reference/mcp.md): the path goes in the URI
// percent-encoded as one segment, as encodeURIComponent (and RFC 6570 expansion of {path}) does.
async function assets(client) {
  const { resourceTemplates } = await client.listResourceTemplates();
  const templates = resourceTemplates.map((t) => t.uriTemplate);
  assert.ok(templates.includes('dccflow://lineage/{path}{?depth}') && templates.includes('dccflow://stale/{path}'), JSON.stringify(templates));
  const { resources } = await client.listResources();
  assert.ok(resources.some((r) => r.uri === 'dccflow://stale'), JSON.stringify(resources));

  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'mcp assets é-')));
  const src = join(dir, 'layout.abc');
  const out = join(dir, 'shot #1.usda');
  writeFileSync(src, 'layout');
  writeFileSync(out, 'shot');
  const spec = JSON.stringify({ name: 'assets', steps: [{ id: 'assemble', tool: 'flow__echo', args: { value: 1 }, reads: [src], writes: [out] }] });
  const res = await client.callTool({ name: 'workflows_run', arguments: { spec, wait_secs: 20 } });
  assert.equal(res.structuredContent.status, 'completed', JSON.stringify(res));

  const read = async (uri) => JSON.parse((await client.readResource({ uri })).contents[0].text);
  const lineage = await read(`dccflow://lineage/${encodeURIComponent(out)}`);
  assert.equal(lineage.path, out);
  assert.equal(lineage.now, 'unchanged');
  assert.equal(lineage.made.run_id, res.structuredContent.workflow_id);
  assert.equal(lineage.made.step_key, 'assemble');
  assert.deepEqual(lineage.made.inputs.map((i) => [i.path, i.now]), [[src, 'unchanged']]);
  assert.deepEqual((await read(`dccflow://stale/${encodeURIComponent(dir)}`)).stale, []);

  writeFileSync(src, 'layout, changed');
  const { stale } = await read(`dccflow://stale/${encodeURIComponent(dir)}`);
  assert.deepEqual(stale.map((s) => [s.path, s.reason]), [[out, `input changed: ${src}`]]);

  // An unrecorded path: a JSON-RPC error whose message starts with the engine's code.
  await assert.rejects(client.readResource({ uri: `dccflow://lineage/${encodeURIComponent(join(dir, 'nope.usd'))}` }),
    /not_found: no recorded attempt read or wrote/);
}

// Subscribe to a run resource, then read it after each notifications/resources/updated until it
// shows the run terminal: the server sends an update after the run's last event.
async function subscription(client) {
  assert.equal(client.getServerCapabilities().resources?.subscribe, true);
  const updated = [];
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => { updated.push(n.params.uri); });

  const started = await client.callTool({ name: 'workflows_run', arguments: { workflow: 'gated', inputs: { shot: 'sh020' } } });
  const id = started.structuredContent.workflow_id;
  const uri = `dccflow://runs/${id}`;
  for (let i = 0; i < 200; i++) {
    if ((await client.callTool({ name: 'workflows_get_status', arguments: { workflow_id: id } })).structuredContent.status === 'waiting') break;
    await sleep(20);
  }
  assert.deepEqual(await client.subscribeResource({ uri }), {});
  const approved = await client.callTool({ name: 'workflows_approve', arguments: { workflow_id: id, step: 'human_gate', approved: true } });
  assert.equal(approved.isError ?? false, false, JSON.stringify(approved));

  let seen = 0;
  let doc;
  for (let i = 0; i < 500 && !doc?.run.terminal; i++) {
    if (updated.length > seen) {
      seen = updated.length;
      doc = JSON.parse((await client.readResource({ uri })).contents[0].text);
    } else {
      await sleep(20);
    }
  }
  assert.ok(seen > 0, 'no notifications/resources/updated');
  assert.equal(doc.run.terminal, true, JSON.stringify(doc?.run));
  assert.equal(doc.run.status, 'completed');
  assert.ok(updated.every((u) => u === uri), JSON.stringify(updated));
  assert.deepEqual(await client.unsubscribeResource({ uri }), {});

  // An ended run: one update follows the subscribe at once.
  await sleep(300); // an update sent just before the unsubscribe may still be on its way
  const before = updated.length;
  await client.subscribeResource({ uri });
  for (let i = 0; i < 250 && updated.length === before; i++) await sleep(20);
  assert.equal(updated.length, before + 1);
  await client.unsubscribeResource({ uri });

  // Only runs can be subscribed to: a JSON-RPC error naming the URI.
  await assert.rejects(client.subscribeResource({ uri: 'dccflow://runs/nope' }), /resource not found: dccflow:\/\/runs\/nope/);
  await assert.rejects(client.subscribeResource({ uri: 'dccflow://catalog' }), /dccflow:\/\/catalog cannot be subscribed to/);
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
      await exercise(client, { lossyEnd: true });
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
    await exercise(client, { lossyEnd: false });
  } finally {
    await client.close();
  }
});

