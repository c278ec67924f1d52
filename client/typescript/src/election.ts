// Elections: a leadership is a lease on the election's name whose token is
// the term and which carries a value.

import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, LeaseNotHeldError, decodeError } from "./errors.js";
import { Held, RELEASE_TIMEOUT, type LeaseCore } from "./lease.js";
import { decoder } from "./observe.js";
import { LEASE_NOT_HELD } from "./rules.js";
import type { StreamTransport } from "./stream.js";
import { linkSignals, toBytes } from "./util.js";

/**
 * Leadership is an election won through a Client: a term in office,
 * attached to a session that keeps it alive until it is resigned or the
 * session ends.
 *
 * Check signal while acting as the leader, and hand term to the resources
 * the leader writes to, so that they can refuse an older term's writes.
 */
export class Leadership extends Held<LeaseCore> {
  private current: Uint8Array;
  private proclaiming: Promise<unknown> = Promise.resolve();

  /** @internal */
  constructor(core: LeaseCore, transport: StreamTransport, value: Uint8Array, callTimeoutMs: number) {
    super(core, transport, callTimeoutMs);
    this.current = value;
  }

  /** The election's name. */
  get election(): string {
    return this.core.name;
  }
  /** Who leads: the Client's identity and a suffix unique to this campaign. */
  get candidate(): string {
    return this.core.holder;
  }
  /** The term: the leadership's fencing token. */
  get term(): bigint {
    return this.core.token;
  }
  /** The value last proclaimed. */
  get value(): Uint8Array {
    return new Uint8Array(this.current);
  }
  /** The value last proclaimed, as UTF-8 text. */
  get valueText(): string {
    return decoder.decode(this.current);
  }
  /**
   * proclaim publishes value as the sitting leader (observers see a
   * "proclaimed" event): a Campaign in this term only. When the term is
   * over, the leadership ends as lost and proclaim throws
   * LeaseNotHeldError; a transient error leaves the leadership as it was.
   */
  proclaim(value: string | Uint8Array, opts: { signal?: AbortSignal } = {}): Promise<void> {
    const run = this.proclaiming.then(() => this.proclaimNow(toBytes(value), opts.signal));
    this.proclaiming = run.catch(() => undefined);
    return run;
  }

  private async proclaimNow(value: Uint8Array, signal: AbortSignal | undefined): Promise<void> {
    const l = this.core;
    if (l.ended) throw l.ended;
    const linked = linkSignals(signal, l.controller.signal);
    let resp;
    try {
      ({ value: resp } = await this.transport.run(
        "campaign",
        {
          election: l.name,
          candidate: l.holder,
          value,
          ttl: durationFromMs(Math.round(l.session.ttl)),
          term: l.token,
          sessionId: l.session.id,
        },
        linked.signal,
        this.callTimeoutMs,
      ));
    } catch (e) {
      const err = decodeError(e);
      if (err instanceof LeaseNotHeldError) l.session.detach(l, l.endError("lost", "the term is over", err));
      throw err instanceof LeaseNotHeldError || !l.ended ? err : l.ended;
    } finally {
      linked.dispose();
    }
    if (!resp.elected || resp.leader?.term !== l.token) {
      const err = new LeaseNotHeldError(`coordinator: ${l.describe()}: the coordinator has another term in office`, {
        code: Code.FailedPrecondition,
        reason: LEASE_NOT_HELD,
        metadata: { name: l.name },
      });
      l.session.detach(l, l.endError("lost", "another term is in office", err));
      throw err;
    }
    if (this.ended) throw this.ended; // while the answer was on its way
    this.current = new Uint8Array(value);
  }

  /**
   * resign steps down on the coordinator (the signal aborts with kind
   * "released"), so that the next candidate is elected at once. It resolves
   * true when it stepped down, false when the leadership had already ended:
   * a no-op.
   */
  resign(opts: { timeoutMs?: number } = {}): Promise<boolean> {
    const { name: election, holder: candidate, token: term } = this.core;
    return this.core.release(
      async (signal) => (await this.transport.run("resign", { election, candidate, term }, signal, this.callTimeoutMs)).value.resigned,
      opts.timeoutMs ?? RELEASE_TIMEOUT,
    );
  }

  override toString(): string {
    return `leadership of ${JSON.stringify(this.election)} by ${this.candidate} in term ${this.term}`;
  }
}
