// The proxy bench's provider, in a process of its own: node's http server
// answering every POST with a streamed Anthropic message (server-sent
// events, one event a write, as the provider sends them), after reading
// the whole request body. Run by benches/proxy.rs:
//   node proxy_upstream.js
// Prints {"port": N} on stdout once it listens on 127.0.0.1; ends when its
// stdin closes (the bench exited or dropped it).
'use strict';
const http = require('http');

const TEXT = 'The build fails because the crate pins an older version of the parser.';

function events() {
  const start = {
    id: 'msg_bench', type: 'message', role: 'assistant', model: 'claude-fake', content: [],
    stop_reason: null, stop_sequence: null,
    usage: { input_tokens: 100, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, output_tokens: 1 },
  };
  const out = [
    ['message_start', { type: 'message_start', message: start }],
    ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
  ];
  for (const word of TEXT.split(/(?<= )/)) {
    out.push(['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: word } }]);
  }
  out.push(['content_block_stop', { type: 'content_block_stop', index: 0 }]);
  out.push(['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 12 } }]);
  out.push(['message_stop', { type: 'message_stop' }]);
  return out.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
}

const FRAMES = events();

const server = http.createServer((req, res) => {
  let received = 0;
  req.on('data', (chunk) => { received += chunk.length; });
  req.on('end', () => {
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      'x-received-bytes': String(received),
    });
    for (const frame of FRAMES) res.write(frame);
    res.end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n');
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
