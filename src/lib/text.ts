// Small text helpers with one definition each.

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
/** Text for an HTML element or a quoted attribute value. */
export const escapeHtml = (s: string): string => s.replace(/[&<>"']/g, (ch) => HTML_ESCAPES[ch]!);

/** The form every address is stored and compared in: contacts are unique per (team, normalised address). */
export const normalizeEmail = (email: string): string => email.trim().toLowerCase();

/** `50%_off\` → `50\%\_off\\`: a search term matched literally inside LIKE/ILIKE (default escape `\`). */
export function escapeLike(term: string): string {
  return term.replace(/[\\%_]/g, '\\$&');
}
