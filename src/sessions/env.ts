/**
 * The environment children start with: a scrubbed minimum taken from the server's own
 * environment, Codex's forced values for non-interactive tools, then the request's additions.
 *
 * It must never pass the server's secrets on: `UEXEC_*` and anything named like a token,
 * secret, key or password is dropped from what the server inherited.
 *
 * @module
 */

import { LOGIN_PATH } from "../sandbox/identity/home.ts";

/** Values forced on every child, as Codex does, so tools neither page nor colour. */
export const FORCED_ENV: Readonly<Record<string, string>> = {
  NO_COLOR: "1",
  TERM: "dumb",
  LANG: "C.UTF-8",
  LC_CTYPE: "C.UTF-8",
  LC_ALL: "C.UTF-8",
  COLORTERM: "",
  PAGER: "cat",
  GIT_PAGER: "cat",
  GH_PAGER: "cat",
};

const PASSED_THROUGH = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ"];
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** True for variable names that look like credentials or belong to uexec itself. */
export function isSecretName(name: string): boolean {
  return name.startsWith("UEXEC_") || /TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL/i.test(name);
}

/** The base environment derived from the server's environment. */
export function baseEnv(server: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = { PATH: DEFAULT_PATH };
  for (const name of PASSED_THROUGH) {
    const value = server[name];
    if (value !== undefined && !isSecretName(name)) env[name] = value;
  }
  return { ...env, ...FORCED_ENV };
}

/** The environment of one child. */
export function childEnv(
  base: Record<string, string>,
  workdir: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  const env: Record<string, string> = { ...base, PWD: workdir, ...extra };
  return env.PATH === undefined ? env : { ...env, [LOGIN_PATH]: env.PATH };
}
