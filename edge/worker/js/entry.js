// The Worker's entry: wrangler.toml's `main` (copied beside worker-build's output by
// `hearth_worker_build`). worker-build's module exports the fetch handler as a class that
// workerd builds for every request, wrapped in Proxies that start the wasm again after a
// crash; building them cost 10 to 20 us of CPU a request in workerd (docs/benchmarks.md, P7).
// This module calls the same handler without them, and goes through them only when the wasm
// has crashed, so that it is started again first. Before it, a warm subscription fetch (or its
// 429) is answered by one synchronous call (`answer_held`, edge/worker/src/held.rs), with no
// future and no workers-rs request or response; anything else goes to the handler.
import Handler from "./index.js";

export { Control, Links } from "./index.js";

// worker-build's state of the wasm instance: `criticalError` is set when the wasm trapped.
const state = globalThis.__worker_init_state;
const fetchInRust = Handler.prototype.fetch;
const answerHeld = Handler.prototype.answer_held;
if (typeof fetchInRust !== "function" || typeof answerHeld !== "function" || typeof state !== "object") {
  throw new Error("worker-build's output changed: Hearth's entry.js needs its fetch handler, answer_held and __worker_init_state");
}

// The answer memory holds for `request`, or undefined.
function held(request) {
  const headers = request.headers;
  const answer = answerHeld(
    request.method,
    request.url,
    headers.get("cf-connecting-ip"),
    headers.get("user-agent"),
    headers.get("accept-language"),
  );
  if (answer === undefined) return undefined;
  const [status, lines] = [answer.status, answer.take_headers().split("\n")];
  const body = answer.into_body(); // frees `answer`
  // A plain object, which the Response takes in without a Headers object of its own.
  const out = {};
  for (let i = 0; i + 1 < lines.length; i += 2) out[lines[i]] = lines[i + 1];
  return new Response(request.method === "HEAD" ? null : body, { status, headers: out });
}

function crashed(e) {
  if (e instanceof WebAssembly.RuntimeError) {
    console.error("the Worker's wasm crashed", e);
    state.criticalError = true;
  }
  throw e;
}

export default {
  fetch(request, env, ctx) {
    if (state.criticalError) {
      // Built through worker-build's Proxy: it starts the wasm again before it answers.
      return new Handler(ctx, env).fetch(request);
    }
    try {
      const answer = held(request);
      if (answer !== undefined) return answer;
      return fetchInRust.call({ env, ctx }, request).catch(crashed);
    } catch (e) {
      crashed(e);
    }
  },
};
