// traced_publish.js: publish one message with outbox_publish from inside an
// active OpenTelemetry span, through `pg` instrumented by
// @opentelemetry/instrumentation-pg with addSqlCommenterCommentToQueries on
// (so the query carries /*traceparent='...'*/ of its pg span), as a traced
// web request of an application would.  Used by test/t/089_trace_node.pl.
//
//   node traced_publish.js HOST PORT DATABASE USER TOPIC
//
// Prints one JSON line: {"message_id", "trace_id" (the request span's),
// "request_span_id", "query_span_id" (the pg span, the traceparent's
// parent-id in the comment), "query" (the text pg sent)}.
'use strict';

const api = require('@opentelemetry/api');
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { registerInstrumentations } = require('@opentelemetry/instrumentation');
const { PgInstrumentation } = require('@opentelemetry/instrumentation-pg');

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();
registerInstrumentations({
	tracerProvider: provider,
	instrumentations: [new PgInstrumentation({ addSqlCommenterCommentToQueries: true })],
});

// required after the instrumentation is registered, so that it is patched
const { Client } = require('pg');

async function main() {
	const [host, port, database, user, topic] = process.argv.slice(2);
	const client = new Client({ host, port: Number(port), database, user });
	await client.connect();
	const tracer = api.trace.getTracer('grelout-test');
	const out = await tracer.startActiveSpan('POST /orders', async (span) => {
		try {
			const res = await client.query('SELECT outbox_publish($1, $2::jsonb)::text AS id',
				[topic, JSON.stringify({ order: 42 })]);
			const ctx = span.spanContext();
			return { message_id: res.rows[0].id, trace_id: ctx.traceId, request_span_id: ctx.spanId };
		} finally {
			span.end();
		}
	});
	await client.end();
	const query = exporter.getFinishedSpans().find((s) => s.name.startsWith('pg.query'));
	if (query) {
		out.query_span_id = query.spanContext().spanId;
		out.query_trace_id = query.spanContext().traceId;
		out.query = query.attributes['db.statement'] || query.attributes['db.query.text'] || null;
	}
	process.stdout.write(JSON.stringify(out) + '\n');
	await provider.shutdown();
}

main().catch((err) => {
	process.stderr.write(String(err && err.stack || err) + '\n');
	process.exit(1);
});
