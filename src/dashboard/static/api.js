/**
 * The dashboard's calls to the server's own HTTP API, authenticated by the sign-in cookie the
 * browser sends itself (same origin only). It must never put a token anywhere: the page holds
 * none.
 *
 * @module
 */

/** A refused call: its HTTP status, the API's error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Call `method path` with an optional JSON body; returns the parsed JSON reply. */
export async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { accept: "application/json" } };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    throw new ApiError(
      res.status,
      data?.error?.code ?? `http_${res.status}`,
      data?.error?.message ?? `${method} ${path} answered ${res.status}`,
    );
  }
  return data;
}
