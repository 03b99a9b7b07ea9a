// The dashboard's main navigation: one entry per section, in order. A new
// section adds one line here (and its page plugin in plugin.ts); the layout
// renders this list, marks the current section and wraps it on narrow screens.
export type NavEntry = {
  /** Where the link goes. */
  href: string;
  label: string;
  /** Path prefixes that belong to this section (the link is marked current on them). */
  prefixes: string[];
};

export const NAV: NavEntry[] = [
  { href: '/', label: 'Overview', prefixes: [] },
  { href: '/campaigns', label: 'Campaigns', prefixes: ['/campaigns'] },
  { href: '/emails', label: 'Transactional', prefixes: ['/emails'] },
  { href: '/contacts', label: 'Contacts', prefixes: ['/contacts'] },
  { href: '/suppressions', label: 'Suppressions', prefixes: ['/suppressions'] },
  { href: '/templates', label: 'Templates', prefixes: ['/templates'] },
  { href: '/mail-accounts', label: 'Mail accounts', prefixes: ['/mail-accounts'] },
  { href: '/webhooks', label: 'Webhooks', prefixes: ['/webhooks'] },
  { href: '/developer/api-keys', label: 'API Keys', prefixes: ['/developer'] },
  { href: '/settings/team', label: 'Team settings', prefixes: ['/settings'] },
];

/** The entries with `current` set for the page at `path`. */
export function navFor(path: string): (NavEntry & { current: boolean })[] {
  return NAV.map((entry) => ({
    ...entry,
    current: entry.href === '/' ? path === '/' : entry.prefixes.some((p) => path === p || path.startsWith(`${p}/`)),
  }));
}
