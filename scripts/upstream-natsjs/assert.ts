// Offline stand-in for jsr:@std/assert (jsr.io is not reachable from the machines that run
// scripts/upstream-natsjs.sh). Implements the functions nats.js's tests import, with the
// semantics @std/assert 1.x documents: deep equality that compares own enumerable keys,
// constructors, Map/Set contents, dates, regular expressions and typed arrays element by element;
// the (ErrorClass, msgIncludes, msg) argument forms of assertThrows/assertRejects/assertIsError.
import { inspect } from "node:util";

/** The error every assertion throws. */
export class AssertionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AssertionError";
  }
}

// deno-lint-ignore no-explicit-any
type ErrorClass<E extends Error = Error> = abstract new (...args: any[]) => E;
// deno-lint-ignore no-explicit-any
type AnyConstructor = abstract new (...args: any[]) => any;

function suffix(msg?: string): string {
  return msg ? `: ${msg}` : ".";
}

function show(v: unknown): string {
  return inspect(v, { depth: 8, colors: false, breakLength: 100 });
}

function isPrimitive(v: unknown): boolean {
  return v === null || (typeof v !== "object" && typeof v !== "function");
}

function constructorsEqual(a: object, b: object): boolean {
  return a.constructor === b.constructor ||
    (a.constructor === Object && !b.constructor) ||
    (!a.constructor && b.constructor === Object);
}

function isKeyed(v: unknown): v is Map<unknown, unknown> | Set<unknown> {
  return v instanceof Map || v instanceof Set;
}

/** Deep equality as @std/assert's `equal`. */
export function equal(a: unknown, b: unknown): boolean {
  const seen = new Map<object, object>();
  const compare = (x: unknown, y: unknown): boolean => {
    if (Object.is(x, y)) return true;
    if (typeof x === "number" && typeof y === "number") {
      return x === y;
    }
    if (isPrimitive(x) || isPrimitive(y)) return x === y;
    if (
      (x instanceof RegExp && y instanceof RegExp) ||
      (x instanceof URL && y instanceof URL)
    ) {
      return String(x) === String(y);
    }
    if (x instanceof Date && y instanceof Date) {
      const xt = x.getTime();
      const yt = y.getTime();
      return Object.is(xt, yt);
    }
    if (typeof x !== "object" || typeof y !== "object") return false;
    const xo = x as Record<PropertyKey, unknown>;
    const yo = y as Record<PropertyKey, unknown>;
    if (!constructorsEqual(xo, yo)) return false;
    if (seen.get(xo) === yo) return true;
    if (Object.keys(xo).length !== Object.keys(yo).length) return false;
    seen.set(xo, yo);
    if (isKeyed(xo) && isKeyed(yo)) {
      if (xo.size !== yo.size) return false;
      if (xo instanceof Set && yo instanceof Set) {
        outer: for (const v of xo) {
          if (yo.has(v)) continue;
          for (const w of yo) {
            if (compare(v, w)) continue outer;
          }
          return false;
        }
        return true;
      }
      if (xo instanceof Map && yo instanceof Map) {
        outer: for (const [k, v] of xo) {
          if (yo.has(k)) {
            if (!compare(v, yo.get(k))) return false;
            continue;
          }
          for (const [k2, v2] of yo) {
            if (compare(k, k2) && compare(v, v2)) continue outer;
          }
          return false;
        }
        return true;
      }
      return false;
    }
    const merged = { ...xo, ...yo };
    for (
      const key of [
        ...Object.getOwnPropertyNames(merged),
        ...Object.getOwnPropertySymbols(merged),
      ]
    ) {
      if ((key in xo) !== (key in yo)) return false;
      if (!compare(xo[key], yo[key])) return false;
    }
    return true;
  };
  return compare(a, b);
}

/** Throws unless `expr` is truthy. */
export function assert(expr: unknown, msg = ""): asserts expr {
  if (!expr) throw new AssertionError(msg);
}

/** Throws unless `expr` is falsy. */
export function assertFalse(expr: unknown, msg = ""): void {
  if (expr) throw new AssertionError(msg);
}

/** Throws unless `actual` and `expected` are deeply equal. */
export function assertEquals<T>(actual: T, expected: T, msg?: string): void {
  if (equal(actual, expected)) return;
  throw new AssertionError(
    `Values are not equal${suffix(msg)}\n  actual:   ${show(actual)}\n  expected: ${
      show(expected)
    }`,
  );
}

/** Throws if `actual` and `expected` are deeply equal. */
export function assertNotEquals<T>(actual: T, expected: T, msg?: string): void {
  if (!equal(actual, expected)) return;
  throw new AssertionError(
    `Expected actual: ${show(actual)} not to be: ${show(expected)}${suffix(msg)}`,
  );
}

/** Throws if `actual` is null or undefined. */
export function assertExists<T>(
  actual: T,
  msg?: string,
): asserts actual is NonNullable<T> {
  if (actual === undefined || actual === null) {
    throw new AssertionError(
      msg ?? `Expected actual: "${actual}" to not be null or undefined.`,
    );
  }
}

/** Throws unless `actual` is an instance of `expectedType`. */
export function assertInstanceOf<T extends AnyConstructor>(
  actual: unknown,
  expectedType: T,
  msg = "",
): asserts actual is InstanceType<T> {
  if (actual instanceof expectedType) return;
  throw new AssertionError(
    `Expected object to be an instance of "${expectedType.name}" but was ${
      show(actual)
    }${suffix(msg)}`,
  );
}

/** Throws unless `actual` contains the string `expected`. */
export function assertStringIncludes(
  actual: string,
  expected: string,
  msg?: string,
): void {
  if (actual.includes(expected)) return;
  throw new AssertionError(
    `Expected actual: "${actual}" to contain: "${expected}"${suffix(msg)}`,
  );
}

/** Throws unless `expected` matches `actual`. */
export function assertMatch(
  actual: string,
  expected: RegExp,
  msg?: string,
): void {
  if (expected.test(actual)) return;
  throw new AssertionError(
    `Expected actual: "${actual}" to match: "${expected}"${suffix(msg)}`,
  );
}

/** Throws unless every element of `expected` is deeply equal to one of `actual`. */
export function assertArrayIncludes<T>(
  actual: ArrayLike<T>,
  expected: ArrayLike<T>,
  msg?: string,
): void {
  const all = Array.from(actual);
  const missing = Array.from(expected).filter((e) =>
    !all.some((a) => equal(a, e))
  );
  if (missing.length === 0) return;
  throw new AssertionError(
    `Expected actual: ${show(all)} to include: ${show(Array.from(expected))}${
      suffix(msg)
    }\nmissing: ${show(missing)}`,
  );
}

/** Throws unless `actual` and `expected` differ by at most `tolerance`. */
export function assertAlmostEquals(
  actual: number,
  expected: number,
  tolerance?: number,
  msg?: string,
): void {
  if (Object.is(actual, expected)) return;
  const delta = Math.abs(expected - actual);
  const tol = tolerance ?? Math.abs(expected * 1e-7);
  if (delta <= tol) return;
  throw new AssertionError(
    `Expected actual: "${actual}" to be close to "${expected}": delta "${delta}" is greater than "${tol}"${
      suffix(msg)
    }`,
  );
}

/** Throws an AssertionError. */
export function fail(msg?: string): never {
  throw new AssertionError(`Failed assertion${suffix(msg)}`);
}

/** Throws unless `error` is an Error (of `errorClass`, with a message matching `msgMatches`). */
export function assertIsError<E extends Error = Error>(
  error: unknown,
  errorClass?: ErrorClass<E>,
  msgMatches?: string | RegExp,
  msg?: string,
): asserts error is E {
  if (!(error instanceof Error)) {
    throw new AssertionError(
      `Expected "error" to be an Error object${suffix(msg)}`,
    );
  }
  if (errorClass && !(error instanceof errorClass)) {
    throw new AssertionError(
      `Expected error to be instance of "${errorClass.name}", but was "${error.constructor.name}"${
        suffix(msg)
      } (${error.message})`,
    );
  }
  if (msgMatches === undefined) return;
  const ok = typeof msgMatches === "string"
    ? error.message.includes(msgMatches)
    : msgMatches.test(error.message);
  if (!ok) {
    throw new AssertionError(
      `Expected error message to include ${
        typeof msgMatches === "string" ? `"${msgMatches}"` : String(msgMatches)
      }, but got "${error.message}"${suffix(msg)}`,
    );
  }
}

// Splits the (ErrorClass?, msgIncludes?, msg?) / (msg?) argument forms.
function errorArgs(
  a?: unknown,
  b?: unknown,
  c?: string,
): { cls?: ErrorClass; includes?: string; msg?: string } {
  if (typeof a === "string") return { msg: a };
  if (
    a === undefined ||
    (typeof a === "function" &&
      (a.prototype instanceof Error || a.prototype === Error.prototype))
  ) {
    return { cls: a as ErrorClass | undefined, includes: b as string, msg: c };
  }
  return { msg: b as string };
}

/** Runs `fn` and returns what it throws; throws if it does not throw (or throws the wrong error). */
export function assertThrows<E extends Error = Error>(
  fn: () => unknown,
  errorClassOrMsg?: ErrorClass<E> | string,
  msgIncludesOrMsg?: string,
  msg?: string,
): E {
  const { cls, includes, msg: m } = errorArgs(
    errorClassOrMsg,
    msgIncludesOrMsg,
    msg,
  );
  try {
    fn();
  } catch (err) {
    if (cls) {
      if (!(err instanceof Error)) {
        throw new AssertionError(`A non-Error object was thrown${suffix(m)}`);
      }
      assertIsError(err, cls, includes, m);
    }
    return err as E;
  }
  throw new AssertionError(`Expected function to throw${suffix(m)}`);
}

/** Awaits `fn()` and returns its rejection; throws if it resolves (or rejects with the wrong error). */
export async function assertRejects<E extends Error = Error>(
  fn: () => PromiseLike<unknown>,
  errorClassOrMsg?: ErrorClass<E> | string,
  msgIncludesOrMsg?: string,
  msg?: string,
): Promise<E> {
  const { cls, includes, msg: m } = errorArgs(
    errorClassOrMsg,
    msgIncludesOrMsg,
    msg,
  );
  let returnedPromise = false;
  try {
    const p = fn();
    if (
      p && typeof p === "object" &&
      typeof (p as PromiseLike<unknown>).then === "function"
    ) {
      returnedPromise = true;
      await p;
    } else {
      throw new Error("not a promise");
    }
  } catch (err) {
    if (!returnedPromise) {
      throw new AssertionError(
        `Function throws when expected to reject${suffix(m)}`,
      );
    }
    if (cls) {
      if (!(err instanceof Error)) {
        throw new AssertionError(`A non-Error object was rejected${suffix(m)}`);
      }
      assertIsError(err, cls, includes, m);
    }
    return err as E;
  }
  throw new AssertionError(`Expected function to reject${suffix(m)}`);
}
