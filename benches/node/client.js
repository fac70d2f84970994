// The latency bench's client: vscode-jsonrpc (what editors use) over a
// child's stdio, null requests back to back. Run by benches/latency.rs:
//   node client.js CALLS WARMUP INIT PROGRAM [ARGS...]
// INIT is "toolwire" (initialize a workspace, create the session first) or
// "echo". Prints {"perCallNs": N} on stdout.
'use strict';
const { spawn } = require('child_process');
const rpc = require('vscode-jsonrpc/node');

async function main() {
  const [calls, warmup, init, program, ...args] = process.argv.slice(2);
  const child = spawn(program, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  const connection = rpc.createMessageConnection(
    new rpc.StreamMessageReader(child.stdout),
    new rpc.StreamMessageWriter(child.stdin),
  );
  connection.listen();
  const sessionId = 'bench-latency';
  if (init === 'toolwire') {
    await connection.sendRequest('initialize', {
      processId: process.pid,
      rootUri: 'file://' + process.cwd(),
      capabilities: {},
    });
    connection.sendNotification('initialized', {});
    await connection.sendRequest('pair/append', {
      sessionId,
      message: { role: 'user', content: 'hello' },
    });
  }
  const params = { sessionId };
  for (let i = 0; i < Number(warmup); i++) {
    await connection.sendRequest('state/get', params);
  }
  const n = Number(calls);
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    await connection.sendRequest('state/get', params);
  }
  const elapsed = process.hrtime.bigint() - start;
  if (init === 'toolwire') {
    await connection.sendRequest('shutdown');
  }
  connection.sendNotification('exit');
  await new Promise((resolve) => child.on('exit', resolve));
  connection.dispose();
  process.stdout.write(JSON.stringify({ perCallNs: Number(elapsed) / n }) + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
