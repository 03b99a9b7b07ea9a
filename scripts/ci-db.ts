// CI helper: creates (or drops) a fresh database on the machine's PostgreSQL.
// usage: node scripts/ci-db.ts create|drop <admin-url> <name>
import pg from 'pg';

const [action, adminUrl, name] = process.argv.slice(2);
if (!['create', 'drop'].includes(action) || !adminUrl || !/^[a-z0-9_]+$/.test(name ?? '')) {
  console.error('usage: node scripts/ci-db.ts create|drop <admin-url> <name>');
  process.exit(2);
}
const client = new pg.Client({ connectionString: adminUrl });
await client.connect();
if (action === 'create') await client.query(`CREATE DATABASE ${name}`);
else await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
await client.end();
