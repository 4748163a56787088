import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Webhook signatures as Stripe makes them, a scheme receivers know:
 * `x-switchyard-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, keyed by
 * SWITCHYARD_ALERT_SECRET. The timestamp is signed too, so a receiver can refuse old replays.
 */
export const SIGNATURE_HEADER = "x-switchyard-signature";
export const EVENT_ID_HEADER = "x-switchyard-event-id";

export function signatureHeader(secret: string, body: string, unixSeconds: number): string {
  const mac = createHmac("sha256", secret).update(`${unixSeconds}.${body}`).digest("hex");
  return `t=${unixSeconds},v1=${mac}`;
}

/** What a receiver does (the README shows the same): true when `header` signs `body` within `toleranceS` of `nowS`. */
export function verifySignature(secret: string, body: string, header: string, nowS: number, toleranceS = 300): boolean {
  const parts = Object.fromEntries(header.split(",").map((p) => p.split("=", 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(nowS - t) > toleranceS || typeof parts.v1 !== "string") return false;
  const expected = Buffer.from(createHmac("sha256", secret).update(`${t}.${body}`).digest("hex"));
  const given = Buffer.from(parts.v1);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
