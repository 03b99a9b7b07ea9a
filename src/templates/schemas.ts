// Request and response schemas of the templates API (docs/api.md,
// "Templates").
import { Type, type Static } from 'typebox';
import { DateTime, PageMeta, pageQuery, UUID_PATTERN } from '../http/schemas.ts';
import { LIQUID_MAX_PARTS } from '../lib/render-limits.ts';

/** Template content is at most 1 MiB (docs/api.md, "Templates"). */
export const MAX_CONTENT_CHARS = 1024 * 1024;
/** RFC 5322 line limit; the subject is one header line. */
export const MAX_SUBJECT_CHARS = 998;

// A UUID in the form PostgreSQL reads. ajv's `uuid` format also accepts a
// `urn:uuid:` prefix, which the database would refuse (a 500), hence the pattern.
export const TemplateIdParams = Type.Object({
  id: Type.String({ format: 'uuid', pattern: UUID_PATTERN }),
});

export const TemplateMetaInput = Type.Object(
  {
    json_schema: Type.Optional(Type.String({ maxLength: 65_536 })),
    tags: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 50 })),
  },
  { additionalProperties: false },
);

const CONTENT_DESCRIPTION = `HTML; a Liquid template. At most 1 MiB and ${LIQUID_MAX_PARTS.toLocaleString('en-US')} Liquid parts (tags, outputs, and the names, values, filters and operators in them).`;

export const CreateTemplateBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 255, description: 'Not blank; stored trimmed.' }),
    content: Type.String({ minLength: 1, maxLength: MAX_CONTENT_CHARS, description: CONTENT_DESCRIPTION }),
    content_type: Type.Enum(['html'], { description: 'Only `html`.' }),
    subject: Type.Optional(
      Type.String({ maxLength: MAX_SUBJECT_CHARS, description: 'One line; a Liquid template.' }),
    ),
    alt_content: Type.Optional(
      Type.String({ maxLength: MAX_CONTENT_CHARS, description: 'Plain text; derived from `content` when absent.' }),
    ),
    meta: Type.Optional(TemplateMetaInput),
  },
  { additionalProperties: false },
);

/** PATCH: any field of create; at least one. A changed template is a new version. */
export const UpdateTemplateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'Not blank; stored trimmed.' })),
    content: Type.Optional(
      Type.String({ minLength: 1, maxLength: MAX_CONTENT_CHARS, description: CONTENT_DESCRIPTION }),
    ),
    content_type: Type.Optional(Type.Enum(['html'], { description: 'Only `html`.' })),
    subject: Type.Optional(
      Type.Unsafe<string | null>({
        type: ['string', 'null'],
        maxLength: MAX_SUBJECT_CHARS,
        description: 'One line; a Liquid template. `null` removes the subject.',
      }),
    ),
    alt_content: Type.Optional(
      Type.String({
        maxLength: MAX_CONTENT_CHARS,
        description: 'Plain text. When `content` changes and this is absent, it is derived again from the new `content`.',
      }),
    ),
    meta: Type.Optional(TemplateMetaInput),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type TemplatePatch = Static<typeof UpdateTemplateBody>;

const templateFields = {
  id: Type.String(),
  team_id: Type.String(),
  name: Type.String(),
  subject: Type.Union([Type.String(), Type.Null()], { description: '`null` when the template has no subject.' }),
  content_type: Type.Literal('html'),
  scope: Type.Enum(['private', 'public']),
  status: Type.Enum(['active', 'archived']),
  meta: Type.Object({ json_schema: Type.String(), tags: Type.Array(Type.String()) }),
  version: Type.Integer({ description: '1 at create; each update that changes the template adds one.' }),
  created_at: DateTime,
  updated_at: DateTime,
};

export const Template = Type.Object({ ...templateFields, content: Type.String(), alt_content: Type.String() }, { title: 'Template' });
/** In lists, `content` and `alt_content` only with `include[]=content`. */
export const TemplateListItem = Type.Object(
  { ...templateFields, content: Type.Optional(Type.String()), alt_content: Type.Optional(Type.String()) },
  { title: 'TemplateListItem' },
);

export const TemplateResponse = Type.Object({ ok: Type.Literal(true), template: Template });

const Include = Type.Array(Type.Enum(['content']), {
  description: '`content` adds `content` and `alt_content` to each template.',
  maxItems: 5,
});
export const ListTemplatesQuery = pageQuery(20, {
  search: Type.Optional(Type.String({ maxLength: 255, description: 'Case-insensitive substring of the name.' })),
  'include[]': Type.Optional(Include),
  include: Type.Optional(Include),
});

export const TemplateListResponse = Type.Object({
  ok: Type.Literal(true),
  templates: Type.Object({ data: Type.Array(TemplateListItem) }),
  meta: PageMeta,
});
