// The public HTTP API (CONTRACT.md), as the console calls it: JSON in and out, the API key from
// sessionStorage sent as `Authorization: Bearer`, errors thrown with the service's own message.

const KEY_ITEM = "hygraph.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

function headers(json) {
  const out = {};
  if (json) out["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

async function failure(resp) {
  let code = "http_error";
  let message = resp.statusText;
  try {
    const body = await resp.json();
    code = body.error?.code ?? code;
    message = body.error?.message ?? message;
  } catch {
    // Not the service's JSON error shape (a proxy in between): the status line says what happened.
  }
  return new ApiError(resp.status, code, message);
}

export async function call(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

// `/v1/documents/{id}`: an id may hold `/`, `?`, `#` or `%`, so every character outside the unreserved set is encoded.
export function documentPath(id) {
  return `/v1/documents/${encodeURIComponent(id)}`;
}

// The retrieval modes the service takes: the `mode` enum of `POST /v1/query` in its OpenAPI schema.
export async function modes() {
  const schema = await call("GET", "/openapi.json");
  const mode = schema.components.schemas.QueryRequest.properties.mode;
  const options = [mode, ...(mode.anyOf ?? [])].flatMap((s) => s.enum ?? (s.$ref ? refEnum(schema, s.$ref) : []));
  return [...new Set(options)];
}

function refEnum(schema, ref) {
  const name = ref.split("/").pop();
  return schema.components.schemas[name]?.enum ?? [];
}

// POST /v1/query with `stream`: answer tokens as they come (`onToken`), then the full result.
export async function queryStream(request, onToken) {
  const resp = await fetch("/v1/query", {
    method: "POST",
    headers: headers(true),
    body: JSON.stringify({ ...request, stream: true }),
  });
  if (!resp.ok) throw await failure(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event.name === "token") onToken(event.data.text);
      else if (event.name === "done") return event.data;
      else if (event.name === "error") {
        throw new ApiError(resp.status, event.data.error.code, event.data.error.message);
      }
    }
  }
  throw new ApiError(resp.status, "stream_ended", "the answer stream ended without its final event");
}

function parseEvent(text) {
  let name = "message";
  const data = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  return { name, data: JSON.parse(data.join("\n")) };
}

// GET /v1/jobs/{id} every `intervalMs` until the job is done or failed; `onStatus` sees every answer.
export async function waitForJob(jobId, onStatus, intervalMs = 700) {
  for (;;) {
    const job = await call("GET", `/v1/jobs/${encodeURIComponent(jobId)}`);
    onStatus(job);
    if (job.status === "done" || job.status === "failed") return job;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
