// OpenClaw's runner around its tool-loop detector, modelled per run for every harness that
// decides whole runs: the differential driver and bench/openclaw_runs.mjs. Each tool_call is
// decided as the runner decides a batch of one call (docs/semantics.md, "openclaw-2026.9"):
// detectToolCallLoop, then recordToolCall, or for a block the veto record; the warning
// publication and its note; results through recordToolCallOutcome; the recovery allowance of
// runLoop (a second critical ends the run).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { detector, dist, toolName, vetoResult } from "./openclaw.mjs";

/** The runner's bundle (dist/agent-core-*.mjs): its file name and source text. */
export function agentCore() {
  const file = readdirSync(dist).find((name) => /^agent-core-[\w-]+\.mjs$/.test(name));
  if (!file) throw new Error(`no dist/agent-core-*.mjs in ${dist}`);
  return { file, text: readFileSync(join(dist, file), "utf8") };
}

// The runner's warning publication (shouldEmitLoopWarning): buckets of 10, at most 256 keys.
function shouldEmit(buckets, key, count) {
  const bucket = Math.floor(count / 10);
  if (bucket <= (buckets.get(key) ?? 0)) return false;
  buckets.set(key, bucket);
  while (buckets.size > 256) buckets.delete(buckets.keys().next().value);
  return true;
}

function isVeto(result) {
  const details = result && typeof result === "object" ? result.details : undefined;
  return Boolean(details && details.status === "blocked" && details.deniedReason === "tool-loop");
}

/**
 * The runner model, loaded from the pinned package: `detectorOf(runId)` (one run's detector
 * side, event by event) and `runOf(runId)` (the same with the recovery allowance: a verdict's
 * `terminate_run`).
 */
export async function runnerModel() {
  const { detectToolCallLoop, recordToolCall, recordToolCallOutcome } = await detector();
  const core = agentCore();
  const terminated = core.text.match(/const TOOL_LOOP_RECOVERY_TERMINATED_MESSAGE = ("(?:[^"\\]|\\.)*");/);
  if (!terminated) throw new Error(`no TOOL_LOOP_RECOVERY_TERMINATED_MESSAGE in ${core.file}`);
  const TERMINATED_MESSAGE = JSON.parse(terminated[1]);
  // The note the runner appends to a published warning's result, through the internal-hooks
  // bundle agent-core imports.
  const hooksImport = core.text.match(/import \{([^}]*)\} from "\.\/(internal-hooks-[\w-]+\.mjs)"/);
  const noteAlias = hooksImport?.[1].split(",").map((part) => part.trim().split(/\s+as\s+/))
    .find(([, name]) => name === "appendToolLoopWarning")?.[0];
  if (!noteAlias) throw new Error(`${core.file} does not import appendToolLoopWarning`);
  const appendToolLoopWarning = (await import(pathToFileURL(join(dist, hooksImport[2])).href))[noteAlias];
  // The text appendToolLoopWarning adds to a tool result for a warning of `count` calls.
  const warningNote = (count) => appendToolLoopWarning({ content: [] }, { count }).content.at(-1).text;

  // The detector side of one run, event by event: each call's verdict (null when none), the
  // runner's warning publication and note, the veto record of a block, and outcomes recorded
  // as the runner records them.
  function detectorOf(runId) {
    const state = { toolCallHistory: [] };
    const buckets = new Map();
    const vetoed = new Set(); // tool_call_ids of calls already vetoed (blocked here or reported)
    const config = { enabled: true };
    return (ev) => {
      if (ev.type === "tool_call") {
        const tool = toolName(ev.tool);
        const found = detectToolCallLoop(state, tool, ev.args, config, { runId });
        if (!found.stuck) {
          recordToolCall(state, tool, ev.args, ev.tool_call_id, config, { runId });
          return null;
        }
        const verdict = {
          level: found.level,
          detector: found.detector,
          count: found.count,
          message: found.message,
          warning_key: found.warningKey,
          paired_tool: found.pairedToolName ?? null,
          liveness_signal: found.livenessSignal ?? null,
        };
        if (found.level === "critical") {
          verdict.published = true;
          verdict.note = null;
          // blockToolCall: the blocked result goes through recordLoopOutcome (a veto record).
          const blocked = vetoResult(found.message);
          recordToolCallOutcome(state, {
            toolName: tool, toolParams: ev.args, toolCallId: ev.tool_call_id, result: blocked, runId,
          });
          if (ev.tool_call_id) vetoed.add(ev.tool_call_id);
        } else {
          verdict.published = shouldEmit(buckets, `${runId}:${found.warningKey}`, found.count);
          // finalizeToolCallOutcome appends the note to a published warning's result only.
          verdict.note = verdict.published ? warningNote(found.count) : null;
          recordToolCall(state, tool, ev.args, ev.tool_call_id, config, { runId });
        }
        return verdict;
      }
      if (ev.type === "tool_result") {
        // A runtime echoing the veto it answered the model with: the runner never sees it twice.
        if (ev.tool_call_id && vetoed.has(ev.tool_call_id) && !("error" in ev) && isVeto(ev.result)) {
          return null;
        }
        const outcome = { toolName: toolName(ev.tool), toolParams: ev.args, toolCallId: ev.tool_call_id, runId };
        if ("error" in ev) outcome.error = ev.error;
        else outcome.result = ev.result;
        recordToolCallOutcome(state, outcome);
        if (ev.tool_call_id && !("error" in ev) && isVeto(ev.result)) vetoed.add(ev.tool_call_id);
      }
      return null;
    };
  }

  // One run's verdicts with runLoop's recovery allowance modelled: a critical intervention
  // sets toolLoopRecoveryState.criticalToolLoopSeen; executeToolCalls passes it as `terminal`
  // to the next intervention, which ends the run (terminateRun). Only Agent.prompt/reset clear
  // it: never within one run, so a stream that goes on past the end meets `terminal` at every
  // later critical (the driver's "runner" mode checks this model against the real runAgentLoop).
  function runOf(runId) {
    const step = detectorOf(runId);
    let criticalToolLoopSeen = false;
    return (ev) => {
      const verdict = step(ev);
      if (verdict === null) return null;
      verdict.terminate_run = null;
      if (verdict.level === "critical") {
        if (criticalToolLoopSeen) verdict.terminate_run = TERMINATED_MESSAGE;
        criticalToolLoopSeen = true;
      }
      return verdict;
    };
  }

  return { detectorOf, runOf, recordToolCallOutcome };
}
