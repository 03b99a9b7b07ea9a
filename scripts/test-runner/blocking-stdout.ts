// Preloaded (--import) into every test file's process by scripts/test.ts.
//
// Node's test runner runs each file in a child process that streams its test
// events to the runner over stdout, a pipe. On Linux a pipe is non-blocking, so
// when --test-force-exit ends the child with process.exit() the events still
// buffered in the pipe are lost: the run reports fewer tests than ran, a lost
// failure among them, and exits 0 (nodejs/node#64833, open as of Node 24/26).
// Made blocking, every write of a verdict has reached the pipe before the next
// line runs, so nothing is left to lose at exit. Node itself does the same to
// stdout before exiting (lib/net.js, lib/tty.js); `_handle` is not public API,
// so a Node without it just keeps the old behaviour and verdicts.ts catches
// any loss.
type PipeHandle = { setBlocking?: (on: boolean) => unknown };

if (process.env.NODE_TEST_CONTEXT) {
  (process.stdout as unknown as { _handle?: PipeHandle })._handle?.setBlocking?.(true);
}
