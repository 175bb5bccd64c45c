// Workload M on OpenClaw's published detector (npm openclaw, the version tests/differential
// pins): a file of wire events (JSON lines, many runs interleaved) decided end to end, each run
// with a state of its own, driven as OpenClaw's runner drives the detector for a batch of one
// call (tests/differential/runner_model.mjs, the model the differential tests check against the
// module and its real runLoop). Each verdict is written as a JSON line, as `loopguard replay`
// writes its decisions.
//
// bench/modern_runs.py starts this once and alternates with LoopGuard:
//   stdin line 1: {"events": path, "out": path}
//   each further line "run": one timed pass (read, decode, decide, write);
//   stdout: {"seconds": s, "events": n, "verdicts": {level: n}, "terminated": n}
// OpenClaw's logger is silenced (OPENCLAW_LOG_LEVEL=silent): left on, it writes every warning
// to its log file, and the bench would measure that instead of detection.
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import { createInterface } from "node:readline";
import { silence } from "../tests/differential/openclaw.mjs";
import { runnerModel } from "../tests/differential/runner_model.mjs";

const writeOut = silence("loopguard-bench-openclaw-");
const { runOf } = await runnerModel();
const FLUSH_CHARS = 1 << 16; // verdict lines written in chunks of ~64 KiB, as a buffered file

function pass(eventsPath, outPath) {
  const verdicts = { warning: 0, critical: 0 };
  let terminated = 0;
  let events = 0;
  const t0 = process.hrtime.bigint();
  const runs = new Map();
  const out = openSync(outPath, "w");
  let pending = "";
  for (const line of readFileSync(eventsPath, "utf8").split("\n")) {
    if (!line) continue;
    const ev = JSON.parse(line);
    events += 1;
    let step = runs.get(ev.run_id);
    if (step === undefined) runs.set(ev.run_id, (step = runOf(ev.run_id)));
    const verdict = step(ev);
    if (verdict === null) continue;
    verdicts[verdict.level] += 1;
    if (verdict.terminate_run !== null) terminated += 1;
    pending += `${JSON.stringify({ run_id: ev.run_id, seq: ev.seq, ...verdict })}\n`;
    if (pending.length >= FLUSH_CHARS) {
      writeSync(out, pending);
      pending = "";
    }
  }
  writeSync(out, pending);
  closeSync(out);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  return { seconds, events, verdicts, terminated };
}

let request;
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (request === undefined) request = JSON.parse(line);
  else writeOut(`${JSON.stringify(pass(request.events, request.out))}\n`);
}
