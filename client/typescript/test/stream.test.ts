// The operation stream: batching, stream breaks, a refused stream, and
// google.rpc.Status results decoded like unary errors.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { anyPack, durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  StreamResponseSchema,
  StreamResultSchema,
  TryAcquireResponseSchema,
  type StreamRequest,
  type StreamResponse,
} from "../src/gen/coordinator/v1/coordinator_pb.js";
import { StatusSchema } from "../src/gen/google/rpc/status_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import type { CoordinatorApi } from "../src/api.js";
import { Code, CoordinatorError, DataLossQuarantineError, InvalidFieldError, LeaseNotHeldError, isTransient } from "../src/errors.js";
import { StreamBrokeError, StreamTransport, resultOf, statusError } from "../src/stream.js";
import { sleep } from "./helpers.js";

/** A fake API whose stream() runs serve with the request stream and yields what it yields. */
function fakeApi(serve: (reqs: AsyncIterator<StreamRequest>, n: number) => AsyncGenerator<StreamResponse>): CoordinatorApi {
  let n = 0;
  return {
    stream: (reqs: AsyncIterable<StreamRequest>) => serve(reqs[Symbol.asyncIterator](), ++n),
  } as unknown as CoordinatorApi;
}

function granted(id: bigint): StreamResponse["results"][number] {
  return create(StreamResultSchema, {
    id,
    result: { case: "acquire", value: create(TryAcquireResponseSchema, { acquired: true, lease: { token: 7n } }) },
  });
}

const acquire = (name: string) =>
  ({ case: "acquire", value: { name, holder: "h#1", ttl: durationFromMs(1000) } }) as const;

describe("operation stream", { concurrency: true, timeout: 30_000 }, () => {
  it("decodes a result's google.rpc.Status into the unary call's error class", () => {
    const st = create(StatusSchema, {
      code: Code.InvalidArgument,
      message: "ttl is too short",
      details: [
        anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { domain: "coordinator.v1", reason: "INVALID_FIELD", metadata: { field: "ttl" } })),
        anyPack(BadRequestSchema, create(BadRequestSchema, { fieldViolations: [{ field: "ttl", description: "too short" }] })),
      ],
    });
    const err = statusError(st);
    assert.ok(err instanceof InvalidFieldError, String(err));
    assert.equal(err.code, Code.InvalidArgument);
    assert.equal(err.reason, "INVALID_FIELD");
    assert.equal(err.field, "ttl");
    assert.match(err.message, /^coordinator: InvalidArgument INVALID_FIELD: ttl is too short$/);

    const q = statusError(
      create(StatusSchema, {
        code: Code.Unavailable,
        message: "quarantined",
        details: [
          anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { domain: "coordinator.v1", reason: "DATA_LOSS_QUARANTINE" })),
          anyPack(RetryInfoSchema, create(RetryInfoSchema, { retryDelay: durationFromMs(1500) })),
        ],
      }),
    );
    assert.ok(q instanceof DataLossQuarantineError);
    assert.equal(q.retryAfter, 1500);
    assert.ok(isTransient(q));

    const res = create(StreamResultSchema, {
      id: 1n,
      result: {
        case: "error",
        value: create(StatusSchema, {
          code: Code.FailedPrecondition,
          message: "not held",
          details: [anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { domain: "coordinator.v1", reason: "LEASE_NOT_HELD", metadata: { name: "n" } }))],
        }),
      },
    });
    assert.throws(() => resultOf(res, "renew"), (e: unknown) => e instanceof LeaseNotHeldError && e.metadata["name"] === "n");
  });

  it("sends operations queued in the same tick in one message, stamped when sent", async () => {
    const seen: number[] = [];
    const api = fakeApi(async function* (reqs) {
      for (;;) {
        const r = await reqs.next();
        if (r.done) return;
        seen.push(r.value.operations.length);
        yield create(StreamResponseSchema, { results: r.value.operations.map((o) => granted(o.id)) });
      }
    });
    const t = new StreamTransport(api, new AbortController().signal, () => undefined);
    const before = performance.now();
    const sig = new AbortController().signal;
    const out = await Promise.all([1, 2, 3].map((i) => t.call(acquire(`n${i}`), sig, 5000)));
    assert.deepEqual(seen, [3]);
    for (const o of out) {
      assert.equal(resultOf(o.res, "acquire").lease?.token, 7n);
      assert.ok(o.sent >= before && o.sent <= performance.now());
    }
    const lone = await t.call(acquire("alone"), sig, 5000);
    assert.equal(resultOf(lone.res, "acquire").acquired, true);
    assert.deepEqual(seen, [3, 1]);
    t.close();
  });

  it("fails what is in flight with a retryable Unavailable when the stream breaks; queued ops go on the next stream", async () => {
    const api = fakeApi(async function* (reqs, n) {
      const r = await reqs.next();
      if (r.done) return;
      if (n === 1) {
        await sleep(20); // meanwhile a second operation is queued
        throw new CoordinatorError("coordinator: Unavailable: connection reset", { code: Code.Unavailable });
      }
      yield create(StreamResponseSchema, { results: r.value.operations.map((o) => granted(o.id)) });
      await reqs.next();
    });
    const t = new StreamTransport(api, new AbortController().signal, () => undefined);
    const sig = new AbortController().signal;
    const first = t.call(acquire("a"), sig, 5000).then(
      () => assert.fail("answered"),
      (e: unknown) => e,
    );
    await sleep(5);
    const second = t.call(acquire("b"), sig, 5000);
    const err = await first;
    assert.ok(err instanceof StreamBrokeError, String(err));
    assert.equal(err.code, Code.Unavailable);
    assert.ok(isTransient(err), "retryable");
    assert.equal(resultOf((await second).res, "acquire").acquired, true);
    t.close();
  });

  it("fails what is queued with the coordinator's error when it refuses the stream itself", async () => {
    let opened = 0;
    const api = fakeApi(async function* (reqs) {
      opened++;
      const first = await reqs.next();
      if (!first.done) throw new CoordinatorError("coordinator: Unimplemented: unknown method Stream", { code: Code.Unimplemented });
      yield create(StreamResponseSchema, {});
    });
    const t = new StreamTransport(api, new AbortController().signal, () => undefined);
    await assert.rejects(t.call(acquire("a"), new AbortController().signal, 5000), (e: unknown) => e instanceof CoordinatorError && e.code === Code.Unimplemented);
    assert.equal(opened, 1);
    t.close();
  });
});
