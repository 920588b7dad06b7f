// Small pieces the client shares: an event emitter that works the same in
// browsers and Node, a Map that forgets its oldest entries, ids, backoff.

/** Listeners by event name; `on` returns the function that removes it. */
export class Emitter {
  #listeners = new Map();

  /**
   * @param {string} event
   * @param {(...args: any[]) => void} fn
   * @returns {() => void} removes the listener
   */
  on(event, fn) {
    if (typeof fn !== 'function') throw new TypeError('a listener is a function');
    let set = this.#listeners.get(event);
    if (!set) this.#listeners.set(event, (set = new Set()));
    set.add(fn);
    return () => this.off(event, fn);
  }

  /** Like `on`, for the next event only. */
  once(event, fn) {
    const off = this.on(event, (...args) => {
      off();
      fn(...args);
    });
    return off;
  }

  off(event, fn) {
    const set = this.#listeners.get(event);
    if (!set) return;
    set.delete(fn);
    if (set.size === 0) this.#listeners.delete(event);
  }

  /**
   * Calls every listener of `event`. A listener that throws does not stop
   * the others or the client: the error is reported asynchronously, as an
   * uncaught error in a DOM event handler would be.
   */
  emit(event, ...args) {
    const set = this.#listeners.get(event);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(...args);
      } catch (e) {
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  }
}

/** A Map of at most `max` entries: adding past it forgets the oldest. */
export class BoundedMap extends Map {
  constructor(max) {
    super();
    this.max = max;
  }

  set(key, value) {
    if (this.has(key)) this.delete(key);
    super.set(key, value);
    while (this.size > this.max) this.delete(this.keys().next().value);
    return this;
  }
}

let counter = 0;

/** A random id: `prefix` + a UUID (or 32 hex digits where randomUUID is missing). */
export function randomId(prefix) {
  const c = globalThis.crypto;
  // randomUUID exists only in secure contexts in browsers; getRandomValues everywhere.
  if (c && typeof c.randomUUID === 'function') return prefix + c.randomUUID();
  if (c && typeof c.getRandomValues === 'function') {
    const bytes = c.getRandomValues(new Uint8Array(16));
    return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }
  counter += 1;
  return `${prefix}${Date.now().toString(36)}-${counter.toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** The server's longest `request_id` (MAX_REQUEST_ID_CHARS). */
export const MAX_REQUEST_ID_CHARS = 128;

/** Whether the server takes this as a chat's `request_id`: 1 to 128 characters, no control characters. */
export function validRequestId(id) {
  if (typeof id !== 'string') return false;
  const chars = Array.from(id);
  // eslint-disable-next-line no-control-regex
  return chars.length >= 1 && chars.length <= MAX_REQUEST_ID_CHARS && !/[\u0000-\u001f\u007f-\u009f]/.test(id);
}

/**
 * Exponential backoff with jitter: the `attempt`th wait (0-based) is drawn
 * from the upper half of min(maxMs, initialMs * 2^attempt), so it never
 * passes maxMs and clients that lost the same server spread out.
 */
export function backoffDelay(attempt, { initialMs, maxMs }) {
  const base = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(base / 2 + (Math.random() * base) / 2);
}
