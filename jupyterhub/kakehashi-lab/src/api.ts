// Calls to this extension's handlers on the user's own Jupyter server (<base_url>kakehashi/…), which forward them to
// the Kakehashi portal with the server's hub token. ServerConnection adds Lab's login and XSRF headers.
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export interface IRefusal {
  detail: string;
  code?: string;
  field?: string | null;
}

export class RefusedError extends Error {
  constructor(
    readonly status: number,
    readonly refusal: IRefusal
  ) {
    super(refusal.detail);
  }
}

export interface IProject {
  slug: string;
  name: string;
  role: string;
}

// As the portal's API spells money: `amount` exact (four decimals), `text` as the pages show it ("0.0042 points").
export interface IMoney {
  amount: string;
  unit: string;
  text: string;
}

export interface ISoftware {
  slug: string;
  name: string;
  kind: string;
  provides: string[];
  kernels: string[];
  clusters: string[];
}

export interface IHardware {
  slug: string;
  name: string;
  cluster: string;
  gpus_per_node: number;
  gpu_model: string;
  max_nodes: number;
  price_per_node_hour: IMoney | null;
}

export interface IPreset {
  slug: string;
  label: string;
  nodes: number;
  hardware: string | null;
  options: string[];
  price_per_node_hour: IMoney | null;
}

export interface IChoices {
  software: ISoftware[];
  hardware: IHardware[];
  presets: IPreset[];
}

export interface IBesideFile {
  path: string; // relative to the notebook's folder
  size: number;
}

export interface IParameters {
  path: string;
  name: string;
  parameters: { name: string; default: string }[];
  beside: IBesideFile[]; // the files beside the notebook that may travel with it
  beside_cut: boolean; // more than the dialog lists
  limits: { files: number; bytes: number };
}

export interface ISubmitRequest {
  path: string;
  project: string;
  name: string;
  software: string;
  hardware: string;
  nodes: number;
  walltime: string;
  parameters: Record<string, string>;
  files: string[]; // beside the notebook, sent with it
  dry_run: boolean;
}

export interface ISubmission {
  dry_run: boolean;
  id: number | null;
  state: string;
  estimate: IMoney | null;
  budget: {
    available: string;
    after: string;
    unit: string;
    fits: boolean;
    text: { available: string; after: string }; // as the pages show them, without the unit
  } | null;
  warnings: string[];
  link: string | null;
}

export interface IJob {
  id: number;
  name: string;
  state: string;
  state_reason: string;
  ended: boolean;
  link: string | null;
  executed: boolean;
}

async function call<T>(
  path: string,
  init: RequestInit = {},
  query: Record<string, string> = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const search = new URLSearchParams(query).toString();
  const url =
    URLExt.join(settings.baseUrl, 'kakehashi', path) +
    (search ? `?${search}` : '');
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new RefusedError(0, {
      detail: `Jupyter server not reachable: ${error}`
    });
  }
  let data: any = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const detail =
      (data && (data.detail || data.message)) ||
      `${response.status} ${response.statusText}`;
    throw new RefusedError(response.status, { ...(data || {}), detail });
  }
  return data as T;
}

function post<T>(
  path: string,
  body: unknown,
  headers: Record<string, string> = {}
): Promise<T> {
  return call<T>(path, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'Content-Type': 'application/json', ...headers }
  });
}

// A Kakehashi session, as this server's /kakehashi/session answers (the portal's figures for it).
export interface ISession {
  id: number;
  name: string;
  state: string;
  seconds_left: number | null;
  ends_at: string | null;
  cost_so_far: { amount: string; unit: string } | null;
  budget_left: { amount: string; unit: string } | null;
  warning: string;
  ended_why: string;
  link: string | null;
}

export const api = {
  session: () => call<ISession>('session'),
  projects: () => call<{ projects: IProject[] }>('projects'),
  choices: (project: string) => call<IChoices>('choices', {}, { project }),
  parameters: (path: string) => call<IParameters>('parameters', {}, { path }),
  submit: (request: ISubmitRequest, idempotencyKey: string) =>
    post<ISubmission>('jobs', request, { 'Idempotency-Key': idempotencyKey }),
  job: (id: number) => call<IJob>(`jobs/${id}`),
  saveExecuted: (id: number, path: string) =>
    post<{ path: string }>(`jobs/${id}/executed`, { path })
};
