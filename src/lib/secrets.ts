// Secrets at rest (SMTP passwords, webhook secrets): AES-256-GCM with a key
// derived from APP_SECRET by HKDF, one key per purpose. Stored form:
// version byte (1) | 12-byte nonce | ciphertext | 16-byte tag.
import { createCipheriv, createDecipheriv, createSecretKey, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';

const VERSION = 1;

export class SecretBox {
  // A KeyObject: a Buffer key costs a key object per cipher (18 µs against 5 here).
  private readonly key: KeyObject;
  constructor(appSecret: string, purpose: string) {
    this.key = createSecretKey(Buffer.from(hkdfSync('sha256', appSecret, 'plover', `plover:${purpose}`, 32)));
  }

  seal(plain: string): Buffer {
    const nonce = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, nonce);
    const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    return Buffer.concat([Buffer.from([VERSION]), nonce, body, cipher.getAuthTag()]);
  }

  open(sealed: Buffer): string {
    if (sealed.length < 29 || sealed[0] !== VERSION) throw new Error('not a sealed secret');
    const nonce = sealed.subarray(1, 13);
    const tag = sealed.subarray(sealed.length - 16);
    const decipher = createDecipheriv('aes-256-gcm', this.key, nonce);
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(sealed.subarray(13, sealed.length - 16)), decipher.final()]).toString('utf8');
  }
}
