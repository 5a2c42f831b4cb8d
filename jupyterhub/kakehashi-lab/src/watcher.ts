// Follows a submitted job until it has ended and its executed notebook is back (or clearly will not come), and
// reports every change to its listeners: the dialog while it is open, and a Lab notification that outlives it.
import { Notification } from '@jupyterlab/apputils';
import { ISignal, Signal } from '@lumino/signaling';

import { api, IJob, RefusedError } from './api';

const POLL_MS = 2000;
// After the job ends the portal brings its outputs home; wait this long for the executed notebook.
const EXECUTED_WAIT_MS = 90_000;

export interface IJobView {
  job: IJob | null;
  problem: string | null; // the last refusal or network error, shown as is
  done: boolean; // nothing more will change
}

export class JobWatcher {
  constructor(
    readonly id: number,
    readonly notebookPath: string,
    private readonly openExecuted: (watcher: JobWatcher) => Promise<void>
  ) {
    this.notification = Notification.emit(
      `Kakehashi job ${id}: queued`,
      'in-progress',
      { autoClose: false }
    );
    void this.poll();
  }

  get changed(): ISignal<this, IJobView> {
    return this._changed;
  }

  get view(): IJobView {
    return { job: this.job, problem: this.problem, done: this.done };
  }

  private async poll(): Promise<void> {
    let endedAt: number | null = null;
    while (!this.done) {
      try {
        this.job = await api.job(this.id);
        this.problem = null;
      } catch (error) {
        this.problem =
          error instanceof RefusedError ? error.message : String(error);
        if (error instanceof RefusedError && [401, 403, 404].includes(error.status)) {
          this.done = true; // the portal will not tell us more
        }
      }
      if (this.job?.ended) {
        endedAt = endedAt ?? Date.now();
        this.done =
          this.job.executed || Date.now() - endedAt > EXECUTED_WAIT_MS;
      }
      this.report();
      if (!this.done) {
        await new Promise(resolve => setTimeout(resolve, POLL_MS));
      }
    }
  }

  private report(): void {
    this._changed.emit(this.view);
    const job = this.job;
    const state = job ? job.state.replace('_', ' ') : 'unknown';
    const actions: Notification.IAction[] = [];
    if (job?.link) {
      const link = job.link;
      actions.push({
        label: 'Job page',
        callback: () => window.open(link, '_blank', 'noopener')
      });
    }
    if (job?.executed) {
      actions.push({
        label: 'Open executed notebook',
        displayType: 'accent',
        callback: () => void this.openExecuted(this)
      });
    }
    Notification.update({
      id: this.notification,
      message: `Kakehashi job ${this.id}${job ? ` (${job.name})` : ''}: ${state}${
        this.problem ? ` — ${this.problem}` : ''
      }`,
      type: !job?.ended
        ? 'in-progress'
        : job.state === 'completed'
          ? 'success'
          : 'error',
      autoClose: false,
      actions
    });
  }

  private job: IJob | null = null;
  private problem: string | null = null;
  private done = false;
  private readonly notification: string;
  private readonly _changed = new Signal<this, IJobView>(this);
}
