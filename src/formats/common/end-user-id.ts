import { createHash } from "node:crypto";

/**
 * SHA-256 of the client's end-user id, for the other vendor's field: stable per user (what both
 * vendors' abuse monitoring needs), not reversible. Claude Code puts device and session ids in
 * `metadata.user_id`; OpenAI clients often put an e-mail in `user`, and Anthropic asks for an opaque
 * id there ("do not include … name, email address, or phone number"). The bare hex digest, 64
 * characters: OpenAI refuses a longer `user` (400 `string_above_max_length`).
 */
export function pseudonymousUser(userId: string): string {
  return createHash("sha256").update(userId).digest("hex");
}
