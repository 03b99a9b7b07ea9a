// Column types of timestamps and JSON columns: what Kysely reads back and what it
// accepts on insert and update.
import type { ColumnType } from 'kysely';

export type Ts = ColumnType<Date, Date | string | undefined, Date | string>;
export type NullableTs = ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
export type Json<T = unknown> = ColumnType<T, T | string | undefined, T | string>;
