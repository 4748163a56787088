/**
 * Vendor and proxy error texts as they are really written, each carrying something that must not
 * reach a client. `secrets` must vanish from client messages and from log lines; `internals`
 * (hosts, paths, stack frames, account ids) from client messages only; `kept` is the useful part
 * a client reads to fix its request, which must survive.
 */
export interface LeakyError {
  name: string;
  message: string;
  secrets: string[];
  internals: string[];
  kept: string[];
}

export const LEAKY_ERRORS: LeakyError[] = [
  {
    name: "OpenAI invalid key, masked",
    message: "Incorrect API key provided: sk-proj-********************************************abcd. You can find your API key at https://platform.openai.com/account/api-keys.",
    secrets: ["sk-proj-", "****abcd"],
    internals: ["platform.openai.com", "account/api-keys"],
    kept: ["Incorrect API key provided:"],
  },
  {
    name: "our vendor key echoed whole by a proxy",
    message: "Invalid credentials: x-api-key sk-test-openai-SECRET-0123456789 is not recognised by upstream-auth",
    secrets: ["sk-test-openai-SECRET-0123456789", "SECRET-0123456789"],
    internals: [],
    kept: ["Invalid credentials", "is not recognised by upstream-auth"],
  },
  {
    name: "Anthropic max_tokens over the model's limit (nothing to remove)",
    message: "max_tokens: 9000 > 8192, which is the maximum allowed number of output tokens for claude-3-5-sonnet-20240620",
    secrets: [],
    internals: [],
    kept: ["max_tokens: 9000 > 8192, which is the maximum allowed number of output tokens for claude-3-5-sonnet-20240620"],
  },
  {
    name: "OpenAI context length (nothing to remove)",
    message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.",
    secrets: [],
    internals: [],
    kept: ["This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages."],
  },
  {
    name: "vLLM Python traceback ending in the useful line",
    message:
      'Traceback (most recent call last):\n  File "/opt/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/serving_chat.py", line 212, in create_chat_completion\n    raise ValueError(msg)\n  File "/opt/venv/lib/python3.11/site-packages/vllm/engine/llm_engine.py", line 88, in _validate\n    raise ValueError(f"context {n}")\nValueError: This model\'s maximum context length is 4096 tokens. However, you requested 5000 tokens.',
    secrets: [],
    internals: ["/opt/venv", "serving_chat.py", "llm_engine.py", "line 212", "raise ValueError(msg)", "Traceback"],
    kept: ["This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."],
  },
  {
    name: "Node stack trace with an internal address",
    message: "Error: connect ECONNREFUSED 10.0.3.7:8443\n    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1595:16)\n    at async forwardChat (/srv/app/dist/proxy.js:88:17)",
    secrets: [],
    internals: ["10.0.3.7", "8443", "/srv/app", "proxy.js", "TCPConnectWrap", "forwardChat"],
    kept: ["Error: connect ECONNREFUSED"],
  },
  {
    name: "Java exception with frames",
    message: "java.lang.IllegalStateException: model backend unavailable\n\tat com.acme.inference.Router.route(Router.java:214)\n\tat com.acme.inference.Handler.handle(Handler.java:57)\n\t... 31 more",
    secrets: [],
    internals: ["com.acme", "Router.java", "Handler.java", "31 more"],
    kept: ["java.lang.IllegalStateException: model backend unavailable"],
  },
  {
    name: "a stack trace a proxy flattened onto one line",
    message: "Error: upstream closed at Socket.onEnd (/usr/src/app/node_modules/undici/lib/client.js:1123:22) at endReadableNT (node:internal/streams/readable:1698:12)",
    secrets: [],
    internals: ["/usr/src/app", "undici", "Socket.onEnd", "endReadableNT", "node:internal"],
    kept: ["Error: upstream closed"],
  },
  {
    name: "Envoy reset naming a Kubernetes service",
    message: "upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111 to vllm-0.vllm.svc.cluster.local:8000",
    secrets: [],
    internals: ["vllm-0", "svc.cluster.local", ":8000"],
    kept: ["upstream connect error or disconnect/reset before headers. reset reason: connection failure"],
  },
  {
    name: "nginx 502 page",
    message: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n</body>\r\n</html>\r\n",
    secrets: [],
    internals: ["nginx/1.25.3", "<html", "<center>"],
    kept: ["502 Bad Gateway"],
  },
  {
    name: "Cloudflare 524 page",
    message:
      '<!DOCTYPE html>\n<html lang="en-US">\n<head><title>llm-origin.internal.example.com | 524: A timeout occurred</title>\n<meta name="robots" content="noindex, nofollow" /></head>\n<body><div id="cf-error-details"><h1>A timeout occurred</h1><p>Cloudflare Ray ID: <strong>8a1b2c3d4e5f6789</strong> &bull; Your IP: 203.0.113.45 &bull; Origin: 10.20.30.40:443</p><script>window._cf_chl_opt={cvId: "3"};</script></div></body></html>',
    secrets: [],
    internals: ["llm-origin.internal.example.com", "8a1b2c3d4e5f6789", "203.0.113.45", "10.20.30.40", "_cf_chl_opt"],
    kept: ["524: A timeout occurred"],
  },
  {
    name: "Bedrock AccessDenied echoing ARNs and the account id",
    message:
      "User: arn:aws:sts::123456789012:assumed-role/switchyard-prod/i-0a1b2c3d4e5f is not authorized to perform: bedrock:InvokeModel on resource: arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-20241022-v2:0 because no identity-based policy allows the bedrock:InvokeModel action",
    secrets: [],
    internals: ["123456789012", "arn:aws", "switchyard-prod", "assumed-role", "inference-profile"],
    kept: ["is not authorized to perform: bedrock:InvokeModel on resource:", "because no identity-based policy allows the bedrock:InvokeModel action"],
  },
  {
    name: "Bedrock validation naming a JSON pointer (nothing to remove)",
    message: "Malformed input request: #/messages/0/content: expected type: String, found: JSONArray, please reformat your input and try again.",
    secrets: [],
    internals: [],
    kept: ["Malformed input request: #/messages/0/content: expected type: String, found: JSONArray, please reformat your input and try again."],
  },
  {
    name: "AWS key id and secret from a misconfigured signer",
    message:
      "The security token included in the request is invalid. (AccessKeyId: AKIAIOSFODNN7EXAMPLE, session ASIAY34FZKBOKMUTVV7A) aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    secrets: ["AKIAIOSFODNN7EXAMPLE", "ASIAY34FZKBOKMUTVV7A", "wJalrXUtnFEMI", "bPxRfiCYEXAMPLEKEY"],
    internals: [],
    kept: ["The security token included in the request is invalid."],
  },
  {
    name: "Azure deployment missing, naming the resource host",
    message:
      "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again. (resource: switchyard-eastus.openai.azure.com, deployment: gpt-4o-prod)",
    secrets: [],
    internals: ["switchyard-eastus", "openai.azure.com"],
    kept: ["The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."],
  },
  {
    name: "Azure content filter with a documentation link",
    message:
      "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
    secrets: [],
    internals: ["go.microsoft.com", "fwlink", "2198766"],
    kept: ["The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry."],
  },
  {
    name: "an expired JWT echoed back",
    message:
      "Invalid authentication: token eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzd2l0Y2h5YXJkIiwiZXhwIjoxNzAwMDAwMDAwfQ.c2lnbmF0dXJlLWJ5dGVzLWhlcmU has expired",
    secrets: ["eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ", "eyJzdWIiOiJzd2l0Y2h5YXJkIiwiZXhwIjoxNzAwMDAwMDAwfQ", "c2lnbmF0dXJlLWJ5dGVzLWhlcmU"],
    internals: [],
    kept: ["Invalid authentication: token", "has expired"],
  },
  {
    name: "a proxy's 401 echoing our own gateway key as a bearer token",
    message: "401 Unauthorized: header Authorization: Bearer svc-sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdefg rejected by edge at 10.12.0.4",
    secrets: ["svc-sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdefg", "AbCdEfGhIjKlMnOp"],
    internals: ["10.12.0.4"],
    kept: ["401 Unauthorized"],
  },
  {
    name: "a bearer token with no known prefix",
    message: "Token validation failed for Bearer 7f3a9c2e1b8d4f6a0e5c7b9d2a4f6e8c1b3d5f7a (introspection endpoint returned inactive)",
    secrets: ["7f3a9c2e1b8d4f6a0e5c7b9d2a4f6e8c1b3d5f7a"],
    internals: [],
    kept: ["Token validation failed for Bearer", "introspection endpoint returned inactive"],
  },
  {
    name: "Google API key in a query parameter",
    message: "API key not valid. Please pass a valid API key. (request: /v1beta/models/gemini-pro:generateContent?key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY)",
    secrets: ["AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"],
    internals: [],
    kept: ["API key not valid. Please pass a valid API key."],
  },
  {
    name: "URL with basic auth and an api_key parameter",
    message: "Upstream fetch failed for https://svc:hunter2@llm-proxy.internal:3128/v1/chat?api_key=abc123secretvalue: ECONNRESET",
    secrets: ["hunter2", "abc123secretvalue"],
    internals: ["llm-proxy.internal", "3128"],
    kept: ["Upstream fetch failed for", "ECONNRESET"],
  },
  {
    name: "IPv6 addresses, bracketed with a port and bare",
    message: "no healthy upstream: [fd00:ec2::254]:8080 timed out and 2001:db8:85a3::8a2e:370:7334 refused the connection",
    secrets: [],
    internals: ["fd00:ec2::254", "2001:db8:85a3", "8a2e:370:7334", "8080"],
    kept: ["no healthy upstream:", "timed out and", "refused the connection"],
  },
  {
    name: ".NET exception with Windows paths",
    message:
      "System.IO.FileNotFoundException: Could not find file 'C:\\inference\\models\\llama-70b\\config.json'.\r\n   at System.IO.FileStream.ValidateFileHandle(SafeFileHandle fileHandle, String path)\r\n   at Acme.Serving.ModelLoader.Load(String name) in D:\\a\\build\\src\\ModelLoader.cs:line 42",
    secrets: [],
    internals: ["C:\\inference", "llama-70b\\config.json", "ModelLoader", "D:\\a\\build", "ValidateFileHandle"],
    kept: ["System.IO.FileNotFoundException: Could not find file"],
  },
  {
    name: "Slack and GitHub tokens from a notifier",
    message: "alert webhook failed: xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx rejected; token ghp_16C7e42F292c6912E7710c838347Ae178B4a expired",
    secrets: ["xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"],
    internals: [],
    kept: ["alert webhook failed:", "expired"],
  },
  {
    name: "a private key in a credentials error",
    message: "could not parse service account: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nVJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----\n is not valid",
    secrets: ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "VJTUt9Us8cKjMzEfYyjiWA4R4", "BEGIN PRIVATE KEY"],
    internals: [],
    kept: ["could not parse service account:", "is not valid"],
  },
  {
    name: "Python frame and a Kubernetes host in a connection error",
    message:
      "Internal error: File \"/app/server/routes.py\", line 88, in chat: ConnectionError: HTTPConnectionPool(host='triton.inference.svc', port=8001): Max retries exceeded with url: /v2/models/llama/infer",
    secrets: [],
    internals: ["/app/server", "routes.py", "triton.inference.svc", "/v2/models/llama/infer"],
    kept: ["Internal error:", "ConnectionError: HTTPConnectionPool", "Max retries exceeded with url:"],
  },
  {
    name: "localhost sidecar",
    message: "connect ECONNREFUSED localhost:11434 (is the ollama sidecar running?)",
    secrets: [],
    internals: ["localhost", "11434"],
    kept: ["connect ECONNREFUSED", "(is the ollama sidecar running?)"],
  },
  {
    name: "password and client secret fields in a config dump",
    message: 'upstream auth failed with config {"client_id": "switchyard", "client_secret": "s3cr3t-Value-987", "password": "P@ssw0rd!x"}',
    secrets: ["s3cr3t-Value-987", "P@ssw0rd!x"],
    internals: [],
    kept: ["upstream auth failed with config", '"client_id": "switchyard"'],
  },
];
