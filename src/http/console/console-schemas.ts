import { t } from "elysia";
import { LOGIN_PATTERN, MAX_PASSWORD, MIN_PASSWORD } from "../../console/console-auth.ts";

/** Fields a body carries beyond these are ignored, as the admin API does. */
const open = { additionalProperties: true } as const;

export const Login = t.String({ pattern: LOGIN_PATTERN, error: "must be 3 to 64 letters, digits or . _ @ -", description: "What the account holder signs in with." });
const Password = t.String({ minLength: MIN_PASSWORD, maxLength: MAX_PASSWORD, error: `must be ${MIN_PASSWORD} to ${MAX_PASSWORD} characters` });

/** `POST /console/api/sign-in`: the admin token (an operator) or a login and password (an account holder). */
export const SignIn = t.Object({
  token: t.Optional(t.String({ maxLength: 1000 })),
  login: t.Optional(t.String({ maxLength: 64 })),
  password: t.Optional(t.String({ maxLength: MAX_PASSWORD })),
}, open);
export type SignIn = typeof SignIn.static;

/** `POST /console/api/invites/accept`: the token from the invite link and the password to set. */
export const AcceptInvite = t.Object({ token: t.String({ minLength: 10, maxLength: 200 }), password: Password }, open);
/** `POST /console/api/invites/check`: the token in a body, never a URL (URLs reach access logs). */
export const CheckInvite = t.Object({ token: t.String({ minLength: 10, maxLength: 200 }) }, open);
export type AcceptInvite = typeof AcceptInvite.static;

/** A console session as the pages see it (never the cookie's token). */
export const ConsoleSessionInfo = t.Object({
  kind: t.Union([t.Literal("operator"), t.Literal("holder")]),
  login: t.Union([t.String(), t.Null()]),
  account_id: t.Union([t.String(), t.Null()]),
  csrf: t.String({ description: "Send it back as x-csrf-token on every change." }),
  expires_at: t.String(),
});
export type ConsoleSessionInfo = typeof ConsoleSessionInfo.static;

export const ConsoleQuery = t.Object({
  from: t.Optional(t.String({ maxLength: 40 })),
  to: t.Optional(t.String({ maxLength: 40 })),
  granularity: t.Optional(t.Union([t.Literal("day"), t.Literal("hour")])),
  group_by: t.Optional(t.String({ maxLength: 40 })),
  format: t.Optional(t.Union([t.Literal("json"), t.Literal("csv")])),
  account_id: t.Optional(t.String({ maxLength: 100 })),
  key_id: t.Optional(t.String({ maxLength: 100 })),
  model: t.Optional(t.String({ maxLength: 200 })),
  limit: t.Optional(t.String({ maxLength: 10 })),
  /** The usage view's table: `all` lists every group; else the dearest TABLE_GROUPS and the rest summed (console/usage-summary.ts). */
  groups: t.Optional(t.String({ maxLength: 10 })),
  /** The usage view's period, `24h` or `30d`, ending at the gateway's clock (console/usage-range.ts): instead of from, to and granularity. */
  last: t.Optional(t.String({ maxLength: 10 })),
}, open);
export type ConsoleQuery = typeof ConsoleQuery.static;
