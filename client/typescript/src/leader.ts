// Running as leader: campaign, run the caller's function while in office,
// resign, and campaign again (ClientRules.leader_campaigns_again) until
// stopped, with the leader_* backoff when the function returns soon.

import type { Leadership } from "./election.js";
import { LEADER_CAMPAIGNS_AGAIN, LEADER_EARLY_RETURN, LEADER_RETRY_MAX, LEADER_RETRY_MIN } from "./rules.js";
import { Backoff, linkSignals, now, sleep } from "./util.js";

/** What runAsLeader runs in each term: the leadership, and a signal that aborts when the term ends. */
export type LeaderFn = (leadership: Leadership, signal: AbortSignal) => unknown;

/** The delays between the terms of runAsLeader: from 100 ms, doubling, at most 30 s (ClientRules.leader_retry_*). */
export const leaderBackoff = (): Backoff => new Backoff(LEADER_RETRY_MIN, LEADER_RETRY_MAX);

/**
 * runAsLeader elects with campaign and runs fn in each term until stop
 * aborts (then it resolves). What fn throws goes to onError; without one it
 * resigns and rejects with it.
 */
export async function runAsLeader(
  campaign: (signal: AbortSignal) => Promise<Leadership>,
  fn: LeaderFn,
  onError: ((err: unknown) => void) | undefined,
  stop: AbortSignal,
): Promise<void> {
  const b = leaderBackoff();
  while (!stop.aborted) {
    let leadership: Leadership;
    try {
      leadership = await campaign(stop);
    } catch (e) {
      if (stop.aborted) return;
      throw e;
    }
    const started = now();
    let failed: { err: unknown } | undefined;
    const term = linkSignals(leadership.signal, stop);
    try {
      await fn(leadership, term.signal);
    } catch (e) {
      failed = { err: e };
    } finally {
      term.dispose();
    }
    const ended = leadership.ended; // before resigning: was the term over already?
    await leadership.resign().catch(() => undefined);
    if (failed) {
      if (!onError) throw failed.err;
      onError(failed.err);
    }
    if (stop.aborted || !LEADER_CAMPAIGNS_AGAIN) return;
    if (ended || now() - started >= LEADER_EARLY_RETURN) {
      b.reset();
      continue;
    }
    await sleep(b.delay(), stop);
  }
}
