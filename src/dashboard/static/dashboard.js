// Progressive enhancement only: every page works without this file.
// Copy buttons: <button data-copy="input-id">.
async function copyFrom(button, input) {
  input.select();
  try {
    await navigator.clipboard.writeText(input.value);
  } catch {
    // Clipboard API refused (insecure origin): fall back to the selection.
    document.execCommand('copy');
  }
  button.textContent = 'Copied';
  setTimeout(() => { button.textContent = 'Copy'; }, 2000);
}
document.addEventListener('click', (event) => {
  const button = event.target.closest('button[data-copy]');
  if (!button) return;
  const input = document.getElementById(button.dataset.copy);
  // copyFrom catches the clipboard's refusal itself; the listener has nothing to wait for.
  if (input) void copyFrom(button, input);
});
// Read-only secrets are selected on focus, so Ctrl+C copies them.
document.addEventListener('focusin', (event) => {
  if (event.target.matches?.('input[data-select-on-focus]')) event.target.select();
});
// Forms with data-confirm ask first (the server-side confirmation page is the no-JS path).
document.addEventListener('submit', (event) => {
  const message = event.target.dataset?.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});
