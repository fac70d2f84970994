// The latency bench's node echo server: vscode-jsonrpc over stdio answering
// every request with its params; `exit` ends it.
'use strict';
const rpc = require('vscode-jsonrpc/node');

const connection = rpc.createMessageConnection(
  new rpc.StreamMessageReader(process.stdin),
  new rpc.StreamMessageWriter(process.stdout),
);
connection.onRequest((_method, params) => params);
connection.onNotification('exit', () => process.exit(0));
connection.listen();
