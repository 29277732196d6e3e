// otlp_receiver.js: a local OTLP/HTTP trace receiver (a collector's
// receiver, for tests): takes POST /v1/traces with an
// ExportTraceServiceRequest in JSON, keeps every span with its resource's
// and scope's attributes, and answers 200 with an empty partial success.
// Used by test/t/093_otlp_spans.pl; Node's standard library only.
//
//   node otlp_receiver.js PORT_FILE [HOST]
//
// Writes its port into PORT_FILE once it listens on HOST (127.0.0.1 by
// default).  Control:
//   GET  /spans     every span received, oldest first: the span's JSON as
//                   sent, with "resource" (attributes as {key: value}),
//                   "scope" (name) and "attrs" (its attributes as
//                   {key: value}, intValue as a number) added
//   GET  /stats     {"requests", "spans", "bad" (requests not taken),
//                   "content_types" (of the requests)}
//   POST /hang      from now on, take requests to /v1/traces and never
//                   answer them (a stuck collector)
'use strict';

const fs = require('fs');
const http = require('http');

const spans = [];
const stats = { requests: 0, spans: 0, bad: 0, content_types: [] };
let hang = false;

// flat: OTLP KeyValue attributes as a plain object.
function flat(attributes) {
	const out = {};
	for (const kv of attributes || []) {
		const v = kv.value || {};
		if ('stringValue' in v) out[kv.key] = v.stringValue;
		else if ('intValue' in v) out[kv.key] = Number(v.intValue);
		else if ('boolValue' in v) out[kv.key] = v.boolValue;
		else if ('doubleValue' in v) out[kv.key] = v.doubleValue;
		else out[kv.key] = v;
	}
	return out;
}

// take: the spans of one ExportTraceServiceRequest.
function take(req) {
	for (const rs of req.resourceSpans || []) {
		const resource = flat((rs.resource || {}).attributes);
		for (const ss of rs.scopeSpans || []) {
			for (const span of ss.spans || []) {
				spans.push(Object.assign({}, span, {
					resource, scope: (ss.scope || {}).name, attrs: flat(span.attributes),
				}));
				stats.spans++;
			}
		}
	}
}

// reply: a JSON answer.
function reply(res, status, obj) {
	res.writeHead(status, { 'content-type': 'application/json' });
	res.end(JSON.stringify(obj));
}

const server = http.createServer((req, res) => {
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		if (req.method === 'GET' && req.url === '/spans') return reply(res, 200, spans);
		if (req.method === 'GET' && req.url === '/stats') return reply(res, 200, stats);
		if (req.method === 'POST' && req.url === '/hang') {
			hang = true;
			return reply(res, 200, {});
		}
		if (req.method !== 'POST' || req.url !== '/v1/traces') return reply(res, 404, {});
		stats.requests++;
		stats.content_types.push(req.headers['content-type'] || '');
		if (hang) return;		// never answered
		let body;
		try {
			body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
		} catch (e) {
			stats.bad++;
			return reply(res, 400, { error: String(e) });
		}
		take(body);
		return reply(res, 200, { partialSuccess: {} });
	});
});

server.listen(0, process.argv[3] || '127.0.0.1', () => {
	fs.writeFileSync(process.argv[2], String(server.address().port));
});
