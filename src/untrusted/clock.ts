// The clock the pool and its threads share to say when a task began.

/** Milliseconds since the epoch, sub-millisecond, the same clock in every thread (performance.now() is not). */
export const wallNow = () => performance.timeOrigin + performance.now();
