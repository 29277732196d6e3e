// bench/graphile/worker.mjs: the graphile-worker peer of grelout's benchmark.
//
// One task, "post", POSTs the job's payload as JSON to TARGET_URL with the
// global fetch of Node (undici, keep-alive), sending the payload's "id" as
// the webhook-id header, and fails the job on any non-2xx answer.
//
//   node worker.mjs migrate        install graphile-worker's schema
//   node worker.mjs drain N        run the worker until the N queued jobs are
//                                  done; prints {"jobs":N,"seconds":S,"rate":R}
//   node worker.mjs serve          run the worker until SIGTERM or SIGINT
//
// Environment: PGHOST (socket directory), PGPORT, PGDATABASE, PGUSER,
// TARGET_URL, CONCURRENCY (default 50), POOL_SIZE (default CONCURRENCY).
import { Logger, run, runMigrations } from "graphile-worker";
import pg from "pg";

const mode = process.argv[2];
const concurrency = Number(process.env.CONCURRENCY || 50);
const poolSize = Number(process.env.POOL_SIZE || concurrency);
const target = process.env.TARGET_URL;

const pool = new pg.Pool({ max: poolSize + 2 });
// graphile-worker's Logger takes a factory of scoped log functions
const logger = new Logger(() => (level, message) => {
	if (level === "error") console.error(`graphile-worker: ${message}`);
});

const taskList = {
	post: async (payload) => {
		const res = await fetch(target, {
			method: "POST",
			headers: {
				"content-type": "application/json",
				"webhook-id": String(payload && payload.id !== undefined ? payload.id : ""),
			},
			body: JSON.stringify(payload),
		});
		// read the (empty) body so the connection goes back to the pool
		await res.arrayBuffer();
		if (res.status < 200 || res.status >= 300) {
			throw new Error(`HTTP ${res.status}`);
		}
	},
};

async function pending() {
	const { rows } = await pool.query("SELECT count(*)::int AS n FROM graphile_worker.jobs");
	return rows[0].n;
}

async function main() {
	if (mode === "migrate") {
		await runMigrations({ pgPool: pool, logger });
		return;
	}
	if (mode === "drain") {
		const n = Number(process.argv[3]);
		const start = process.hrtime.bigint();
		const runner = await run({
			pgPool: pool,
			concurrency,
			taskList,
			logger,
			noHandleSignals: true,
			pollInterval: 1000,
		});
		let last = n;
		let lastChange = Date.now();
		for (;;) {
			const left = await pending();
			if (left === 0) break;
			if (left !== last) {
				last = left;
				lastChange = Date.now();
			} else if (Date.now() - lastChange > 60000) {
				await runner.stop();
				throw new Error(`no progress for 60 s with ${left} jobs left`);
			}
			await new Promise((r) => setTimeout(r, 20));
		}
		const seconds = Number(process.hrtime.bigint() - start) / 1e9;
		await runner.stop();
		process.stdout.write(JSON.stringify({ jobs: n, seconds, rate: n / seconds }) + "\n");
		return;
	}
	if (mode === "serve") {
		const runner = await run({
			pgPool: pool,
			concurrency,
			taskList,
			logger,
			noHandleSignals: true,
			pollInterval: 1000,
		});
		process.stdout.write("ready\n");
		await new Promise((resolve) => {
			process.once("SIGTERM", resolve);
			process.once("SIGINT", resolve);
		});
		await runner.stop();
		return;
	}
	throw new Error(`unknown mode ${mode}`);
}

main()
	.then(() => pool.end())
	.then(() => process.exit(0))
	.catch((err) => {
		console.error(err && err.stack ? err.stack : String(err));
		process.exit(1);
	});
