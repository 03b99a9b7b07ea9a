import { parseTemplate } from '../src/templates/render.ts';
const cases: Record<string, string> = {
  outputs: '<p>{{ contact.first_name }}</p>\n'.repeat(12_000),
  markup: ('<div class="row"><p style="color:#333">Hello there, this is a newsletter paragraph with <a href="https://example.com/x">a link</a>.</p></div>\n').repeat(7_000),
};
for (const [name, text] of Object.entries(cases)) {
  const times: number[] = [];
  for (let i = 0; i < 8; i++) { const t = performance.now(); parseTemplate(text); times.push(performance.now() - t); }
  times.sort((a, b) => a - b);
  console.log(name, (text.length / 1024).toFixed(0), 'KiB', 'median', times[4]!.toFixed(1), 'ms', 'min', times[0]!.toFixed(1));
}
