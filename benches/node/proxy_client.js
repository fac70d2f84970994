// The proxy bench's client, in a process of its own: node's http client
// (keep-alive, Nagle off) posting one conversation to the provider
// directly and through `toolwire proxy`, so both figures share the client
// and the provider and differ only by the hop. Run by benches/proxy.rs:
//   node proxy_client.js BODY_FILE DIRECT_URL PROXY_URL REQUESTS WARMUP CONCURRENCY SECONDS
// - latency: WARMUP then REQUESTS requests each way, alternating, one at a
//   time: time to the first body byte and to the end, in ns;
// - throughput: CONCURRENCY clients back to back for SECONDS each way, in
//   alternating halves: completed requests per second.
// Prints one JSON report on stdout.
'use strict';
const fs = require('fs');
const http = require('http');

const [bodyFile, directUrl, proxyUrl, requests, warmup, concurrency, seconds] = process.argv.slice(2);
const body = fs.readFileSync(bodyFile);
const agent = new http.Agent({ keepAlive: true, maxSockets: Number(concurrency) * 2 });
// What the proxy said it did, and the bytes the provider got, by value.
const budget = {};
const cleared = {};
const received = { direct: {}, proxy: {} };

function post(base, which) {
  const url = new URL('/v1/messages', base);
  return new Promise((resolve, reject) => {
    const start = process.hrtime.bigint();
    let first = null;
    const req = http.request(url, {
      method: 'POST',
      agent,
      headers: {
        'content-type': 'application/json',
        'content-length': body.length,
        'anthropic-version': '2023-06-01',
        'x-toolwire-session': 'bench',
      },
    }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`${which}: status ${res.statusCode}`));
      const note = res.headers['x-toolwire-budget'];
      if (note) budget[note] = (budget[note] || 0) + 1;
      const clear = res.headers['x-toolwire-cleared'];
      if (clear) cleared[clear] = (cleared[clear] || 0) + 1;
      const got = res.headers['x-received-bytes'];
      received[which][got] = (received[which][got] || 0) + 1;
      res.on('data', () => {
        if (first === null) first = process.hrtime.bigint();
      });
      res.on('end', () => {
        const end = process.hrtime.bigint();
        resolve([Number((first ?? end) - start), Number(end - start)]);
      });
      res.on('error', reject);
    });
    req.setNoDelay(true);
    req.on('error', reject);
    req.end(body);
  });
}

async function latency() {
  for (let i = 0; i < Number(warmup); i++) {
    await post(directUrl, 'direct');
    await post(proxyUrl, 'proxy');
  }
  const out = { direct: { first: [], total: [] }, proxy: { first: [], total: [] } };
  for (let i = 0; i < Number(requests); i++) {
    for (const [which, url] of [['direct', directUrl], ['proxy', proxyUrl]]) {
      const [first, total] = await post(url, which);
      out[which].first.push(first);
      out[which].total.push(total);
    }
  }
  return out;
}

async function rate(url, which, ms) {
  const deadline = Date.now() + ms;
  let done = 0;
  const start = process.hrtime.bigint();
  const loops = [];
  for (let c = 0; c < Number(concurrency); c++) {
    loops.push((async () => {
      while (Date.now() < deadline) {
        await post(url, which);
        done += 1;
      }
    })());
  }
  await Promise.all(loops);
  return [done, Number(process.hrtime.bigint() - start) / 1e9];
}

async function throughput() {
  const half = Number(seconds) * 500;
  const sum = { direct: [0, 0], proxy: [0, 0] };
  for (let round = 0; round < 2; round++) {
    for (const [which, url] of [['direct', directUrl], ['proxy', proxyUrl]]) {
      const [done, elapsed] = await rate(url, which, half);
      sum[which][0] += done;
      sum[which][1] += elapsed;
    }
  }
  return { direct: sum.direct[0] / sum.direct[1], proxy: sum.proxy[0] / sum.proxy[1] };
}

async function main() {
  const report = {};
  if (Number(requests) > 0) report.latency = await latency();
  if (Number(seconds) > 0) report.throughput = await throughput();
  report.budget = budget;
  report.cleared = cleared;
  report.received = received;
  agent.destroy();
  process.stdout.write(JSON.stringify(report) + '\n');
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
