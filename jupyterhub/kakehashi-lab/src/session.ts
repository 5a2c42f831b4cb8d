// Kakehashi sessions: the status bar says how long this JupyterLab has left on its node, what it has cost so far and
// what the project's budget has left, and warns 15 and 5 minutes before the walltime ends. Only on a server that is
// a Kakehashi session (the server's /kakehashi/session answers 404 elsewhere, and the item stays hidden).
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { api, ISession } from './api';

const WARN_MINUTES = [15, 5];

function money(value: { amount: string; unit: string } | null): string {
  return value ? `${value.amount} ${value.unit}` : '—';
}

export function sessionText(session: ISession): string {
  const left =
    session.seconds_left === null
      ? session.state
      : `${Math.ceil(session.seconds_left / 60)} min left`;
  return `Session ${session.name}: ${left} · ${money(session.cost_so_far)} so far · budget left ${money(session.budget_left)}`;
}

class SessionStatus extends Widget {
  private warned = new Set<number>();
  private timer = 0;

  constructor() {
    super();
    this.addClass('kk-session-status');
    this.node.setAttribute('role', 'status');
    this.node.title = 'This JupyterLab is a Kakehashi session on a compute node';
    void this.refresh();
  }

  private async refresh(): Promise<void> {
    let next = 30_000;
    try {
      const session = await api.session();
      this.node.textContent = sessionText(session);
      this.show();
      const left = session.seconds_left;
      if (left !== null) {
        for (const minutes of WARN_MINUTES) {
          if (left <= minutes * 60 && !this.warned.has(minutes)) {
            WARN_MINUTES.filter(m => m >= minutes).forEach(m => this.warned.add(m));
            Notification.warning(
              session.warning ||
                `This session ends in ${Math.ceil(left / 60)} minute(s), at its walltime: save your work now.`,
              { autoClose: false }
            );
          }
        }
        next = left < 20 * 60 ? 10_000 : 30_000;
      }
    } catch (error: any) {
      if (error?.status === 404) {
        this.hide();
        return; // not a session: nothing to show, nothing to ask again
      }
      // The server (and so the session) is gone, or the portal is away for a moment: say so, ask again later.
      this.node.textContent = 'Session: the portal cannot be reached (it may have ended)';
    }
    this.timer = window.setTimeout(() => void this.refresh(), next);
  }

  dispose(): void {
    window.clearTimeout(this.timer);
    super.dispose();
  }
}

export const sessionPlugin: JupyterFrontEndPlugin<void> = {
  id: 'kakehashi-lab:session',
  description: "A Kakehashi session's time left, cost and budget in the status bar",
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null) => {
    if (!statusBar) {
      return;
    }
    const item = new SessionStatus();
    item.hide();
    statusBar.registerStatusItem('kakehashi-lab:session', {
      item,
      align: 'left',
      rank: 1000
    });
  }
};
