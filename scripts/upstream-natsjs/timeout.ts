// Preloaded by scripts/upstream-natsjs.sh before every test module: bounds each Deno.test by
// $NATSJS_TEST_TIMEOUT seconds (default 180), so a test that hangs fails on its own instead of
// holding the rest of its file (deno test has no per-test timeout of its own).
const seconds = Number(Deno.env.get("NATSJS_TEST_TIMEOUT") ?? "180");
const original = Deno.test;

type Fn = (t: Deno.TestContext) => void | Promise<void>;

function bounded(name: string, fn: Fn): Fn {
  return async (t) => {
    let timer: number | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(
              `"${name}" timed out after ${seconds}s (upstream-natsjs.sh per-test bound)`,
            ),
          ),
        seconds * 1000,
      );
    });
    try {
      await Promise.race([Promise.resolve(fn(t)), expired]);
    } finally {
      clearTimeout(timer);
    }
  };
}

// Accepts every Deno.test form: (def), (name, fn), (fn), (name, opts, fn), (opts, fn).
// deno-lint-ignore no-explicit-any
function wrapped(...args: any[]): void {
  // deno-lint-ignore no-explicit-any
  let def: any;
  if (typeof args[0] === "string") {
    def = typeof args[1] === "function"
      ? { name: args[0], fn: args[1] }
      : { ...args[1], name: args[0], fn: args[2] };
  } else if (typeof args[0] === "function") {
    def = { name: args[0].name, fn: args[0] };
  } else if (typeof args[1] === "function") {
    def = { ...args[0], fn: args[1], name: args[0].name ?? args[1].name };
  } else {
    def = { ...args[0] };
  }
  if (!def.ignore && typeof def.fn === "function") {
    def.fn = bounded(def.name, def.fn);
  }
  original.call(Deno, def);
}

Object.assign(wrapped, {
  ignore: original.ignore,
  only: original.only,
});
Object.defineProperty(Deno, "test", { value: wrapped, configurable: true, writable: true });
