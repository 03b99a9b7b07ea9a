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
// Live template preview: a form with data-live-preview="<url>" posts itself to
// that URL after a pause in typing and swaps in the #preview section of the
// page it gets back (the same page the "Preview" button loads without
// JavaScript). Only the newest answer is shown.
const LIVE_PREVIEW_PAUSE_MS = 600;
for (const form of document.querySelectorAll('form[data-live-preview]')) {
  let timer;
  let latest = 0;
  const refresh = async () => {
    const mine = ++latest;
    let html;
    try {
      const response = await fetch(form.dataset.livePreview, {
        method: 'POST',
        body: new URLSearchParams(new FormData(form)),
        credentials: 'same-origin',
      });
      html = await response.text();
    } catch {
      return; // offline or refused: the Preview button still works
    }
    if (mine !== latest) return;
    const fresh = new DOMParser().parseFromString(html, 'text/html').getElementById('preview');
    const current = document.getElementById('preview');
    if (fresh && current) current.replaceWith(fresh);
  };
  form.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => void refresh(), LIVE_PREVIEW_PAUSE_MS);
  });
}
// The segment builder's live count (views/list-campaign-form.liquid): the rows
// as the server reads them, sent to data-segment-count, at most one request in
// flight, after a 400 ms pause in the typing.
(() => {
  const form = document.querySelector('form[data-segment-count]');
  if (!form) return;
  const out = document.getElementById('segment-count');
  const offset = form.querySelector('[data-tz-offset]');
  // The schedule is typed in the browser's zone: its offset goes with the form.
  if (offset) offset.value = String(-new Date().getTimezoneOffset());
  const numeric = /^-?\d+(\.\d+)?$/;
  const rules = () => [...form.querySelectorAll('.segment-rule')].map((row) => {
    const [field, operator] = [...row.querySelectorAll('select')].map((s) => s.value);
    const value = row.querySelector('input').value;
    if (!field || !operator) return null;
    if (operator === 'is_set' || operator === 'is_not_set') return { field, operator };
    return { field, operator, value: numeric.test(value.trim()) && operator !== 'has_tag' && operator !== 'not_has_tag' && field !== 'tags' ? Number(value) : value };
  }).filter(Boolean);
  let timer = 0;
  let seq = 0;
  const refresh = async () => {
    const mine = ++seq;
    out.textContent = '…';
    try {
      const res = await fetch(`${form.dataset.segmentCount}?rules=${encodeURIComponent(JSON.stringify(rules()))}`, { headers: { accept: 'application/json' } });
      const body = await res.json();
      if (mine !== seq) return;
      out.textContent = res.ok ? (body.count ?? 'not countable here') : `not a valid rule (${body.error?.details?.[0]?.message ?? body.error?.message ?? res.status})`;
    } catch {
      if (mine === seq) out.textContent = '—';
    }
  };
  form.addEventListener('input', (event) => {
    if (!event.target.closest('.segment')) return;
    clearTimeout(timer);
    timer = setTimeout(() => void refresh(), 400);
  });
  form.addEventListener('change', (event) => {
    if (!event.target.closest('.segment')) return;
    clearTimeout(timer);
    timer = setTimeout(() => void refresh(), 50);
  });
})();
// Times marked data-local are shown in the reader's own zone (the page says UTC without JavaScript).
for (const el of document.querySelectorAll('time[data-local]')) {
  const at = new Date(el.dateTime);
  if (!Number.isNaN(at.getTime())) {
    el.title = el.textContent;
    el.textContent = at.toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZoneName: 'short' });
  }
}
