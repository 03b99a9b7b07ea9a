// The Redis connection of an API process (rate-limit counters, src/http/rate-limit-store.ts).
// Fail fast rather than queue: a command issued while Redis is away errors at once,
// and the limiter then fails open instead of holding requests.
import { Redis } from 'ioredis';

export function connectRedis(url: string, onError: (err: Error) => void): Redis {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 2_000 });
  redis.on('error', onError);
  return redis;
}
