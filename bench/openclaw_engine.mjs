// Workload E on OpenClaw's published detector (npm openclaw, the version tests/differential pins),
// driven the way OpenClaw's runner drives it: detectToolCallLoop before a call; on a critical
// verdict the blocked result is recorded (the veto record) and the call does not run; otherwise
// recordToolCall, then recordToolCallOutcome with the call's result.
//
// bench/engine.py starts this once per mode and alternates with LoopGuard's engine:
//   stdin line 1: {"calls": [[tool, args, result, tool_call_id], ...], "enabled": bool}
//   (decoded before timing)
//   each further line "run": one timed pass; stdout: {"seconds": s, "verdicts": {...}}
// OpenClaw's logger is silenced (OPENCLAW_LOG_LEVEL=silent): left on, it writes every warning
// to its log file, and the bench would measure that instead of detection.
import { createInterface } from "node:readline";
import { detector, silence, toolName, vetoResult } from "../tests/differential/openclaw.mjs";

const writeOut = silence("loopguard-bench-openclaw-");
const { detectToolCallLoop, recordToolCall, recordToolCallOutcome } = await detector();

const runId = "bench";
let config;

function pass(calls) {
  const verdicts = { none: 0, warning: 0, critical: 0 };
  let state = { toolCallHistory: [] };
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < calls.length; i++) {
    if (i % 1000 === 0) state = { toolCallHistory: [] };
    const [raw, args, result, toolCallId] = calls[i];
    const tool = toolName(raw);
    const found = detectToolCallLoop(state, tool, args, config, { runId });
    if (found.stuck) {
      verdicts[found.level] += 1;
      if (found.level === "critical") {
        const result = vetoResult(found.message);
        recordToolCallOutcome(state, { toolName: tool, toolParams: args, toolCallId, result, runId });
        continue;
      }
    } else {
      verdicts.none += 1;
    }
    recordToolCall(state, tool, args, toolCallId, config, { runId });
    recordToolCallOutcome(state, { toolName: tool, toolParams: args, toolCallId, result, runId });
  }
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, verdicts };
}

let calls;
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (calls === undefined) {
    const first = JSON.parse(line);
    calls = first.calls;
    config = { enabled: first.enabled !== false };
  } else writeOut(`${JSON.stringify(pass(calls))}\n`);
}
