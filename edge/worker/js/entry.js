// The Worker's entry: wrangler.toml's `main` (copied beside worker-build's output by
// `hearth_worker_build`). worker-build's module exports the fetch handler as a class that
// workerd builds for every request, wrapped in Proxies that start the wasm again after a
// crash; building them cost 10 to 20 us of CPU a request in workerd (docs/benchmarks.md, P7).
// This module calls the same handler without them, and goes through them only when the wasm
// has crashed, so that it is started again first.
import Handler from "./index.js";

export { Control, Links } from "./index.js";

// worker-build's state of the wasm instance: `criticalError` is set when the wasm trapped.
const state = globalThis.__worker_init_state;
const fetchInRust = Handler.prototype.fetch;
if (typeof fetchInRust !== "function" || typeof state !== "object") {
  throw new Error("worker-build's output changed: Hearth's entry.js needs its fetch handler and __worker_init_state");
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
      return fetchInRust.call({ env, ctx }, request).catch(crashed);
    } catch (e) {
      crashed(e);
    }
  },
};
