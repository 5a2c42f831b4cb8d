// Kakehashi for JupyterLab: "Submit notebook as job" on the notebook toolbar and in the command palette.
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, ToolbarButton } from '@jupyterlab/apputils';
import { DocumentRegistry } from '@jupyterlab/docregistry';
import {
  INotebookModel,
  INotebookTracker,
  NotebookPanel
} from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';

import { api } from './api';
import { SubmitForm } from './form';
import { sessionPlugin } from './session';
import { JobWatcher } from './watcher';

const COMMAND = 'kakehashi:submit-notebook';
const LABEL = 'Submit notebook as job';

/** The dialog's Submit button submits the form and keeps the dialog open to follow the job. */
class SubmitDialog extends Dialog<void> {
  constructor(private readonly form: SubmitForm) {
    super({
      title: LABEL,
      body: form,
      buttons: [
        Dialog.cancelButton({ label: 'Close' }),
        Dialog.okButton({ label: 'Submit' })
      ],
      defaultButton: 1,
      focusNodeSelector: 'select'
    });
    this.addClass('kk-dialog');
  }

  resolve(index?: number): void {
    const submit = (index ?? 1) === 1;
    if (submit && !this.form.isSubmitted) {
      void this.form.submit().then(done => {
        if (done) {
          this.node
            .querySelector<HTMLButtonElement>('.jp-Dialog-footer .jp-mod-accept')
            ?.setAttribute('hidden', '');
        }
      });
      return;
    }
    super.resolve(index);
  }
}

async function submitNotebook(
  app: JupyterFrontEnd,
  panel: NotebookPanel
): Promise<void> {
  // The server reads the notebook from disk: save what the user sees first.
  if (panel.context.model.dirty) {
    await panel.context.save();
  }
  const path = panel.context.path;
  let dialog: SubmitDialog | null = null;
  const openExecuted = async (watcher: JobWatcher) => {
    const saved = await api.saveExecuted(watcher.id, watcher.notebookPath);
    dialog?.resolve(0);
    await app.commands.execute('docmanager:open', { path: saved.path });
  };
  const form = new SubmitForm(
    path,
    id => new JobWatcher(id, path, openExecuted),
    openExecuted
  );
  dialog = new SubmitDialog(form);
  await dialog.launch();
  dialog = null;
}

class ToolbarExtension
  implements DocumentRegistry.IWidgetExtension<NotebookPanel, INotebookModel>
{
  constructor(private readonly app: JupyterFrontEnd) {}

  createNew(panel: NotebookPanel): IDisposable {
    const button = new ToolbarButton({
      className: 'kk-submit-button',
      label: LABEL,
      tooltip: 'Run this notebook headless on the cluster or the cloud with Kakehashi',
      onClick: () => void submitNotebook(this.app, panel)
    });
    panel.toolbar.insertItem(10, 'kakehashi-submit', button);
    return button;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'kakehashi-lab:plugin',
  description: 'Submit the open notebook as a Kakehashi job',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null
  ) => {
    app.commands.addCommand(COMMAND, {
      label: LABEL,
      caption: 'Run this notebook headless on the cluster or the cloud with Kakehashi',
      isEnabled: () => tracker.currentWidget !== null,
      execute: async () => {
        const panel = tracker.currentWidget;
        if (panel) {
          await submitNotebook(app, panel);
        }
      }
    });
    palette?.addItem({ command: COMMAND, category: 'Kakehashi' });
    app.docRegistry.addWidgetExtension('Notebook', new ToolbarExtension(app));
  }
};

export default [plugin, sessionPlugin];
