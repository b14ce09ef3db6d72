/*
 * Where the pages find the API.
 *
 * ""  (the default) — same origin: the pages are served by the API itself,
 *     as `make dev` does on http://127.0.0.1:3000.
 *
 * To use these pages against a deployed stack, set the HTTP API's URL, e.g.
 *   window.SUPPORT_AGENT_API_BASE = "https://abc123.execute-api.eu-west-1.amazonaws.com";
 * (no trailing slash; the pages append /api/...). The page's origin must be in
 * the template's AllowedOrigins parameter (CORS is configured on the HttpApi).
 * A deployed API has no /api/dev/tokens, so the pages then ask for a token to
 * be pasted (a JWT from your identity provider).
 */
window.SUPPORT_AGENT_API_BASE = "";

/*
 * The chat page follows a conversation over the WebSocket API (POST /api/ws-ticket gives its URL) and falls back
 * to the long-polled event feed when the socket fails. Set false to use only the long poll (a deployment without
 * the WebSocket API, or a proxy that refuses upgrades).
 */
window.SUPPORT_AGENT_WEBSOCKET = window.SUPPORT_AGENT_WEBSOCKET ?? true;
