// The clock the pool and its threads share to say when a task began.

/**
 * Milliseconds on the process's monotonic clock (uv_hrtime): the same clock in
 * every thread, and it never jumps. `performance.now()` counts from each
 * thread's own start, and `performance.timeOrigin` is the wall clock at that
 * start, so their sum disagrees between threads once the wall clock has been
 * stepped (NTP, a resumed VM) between two threads' starts.
 */
export const sharedNow = () => Number(process.hrtime.bigint()) / 1e6;
