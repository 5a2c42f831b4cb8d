// The body of the "Submit notebook as job" dialog: choose project, software, hardware (a preset or exact hardware),
// walltime, name and the notebook's parameters; see the estimate and the budget left (the portal's dry run);
// submit (the dialog's Submit button calls submit()); then follow the job until it ends and open the executed
// notebook.
import { Widget } from '@lumino/widgets';

import {
  api,
  IBesideFile,
  IChoices,
  IMoney,
  IParameters,
  IProject,
  ISubmission,
  ISoftware,
  ISubmitRequest,
  RefusedError
} from './api';
import { IJobView, JobWatcher } from './watcher';

const ESTIMATE_DELAY_MS = 400;
// What a notebook job needs from its software: papermill (and the notebook's kernel), never the cluster's bare shell.
const NOTEBOOK_NEEDS = ['papermill'];

function sizeText(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

// "PyTorch 2.13 + papermill (modules)" already says its kind: never "(modules) (modules)".
function softwareLabel(s: ISoftware): string {
  return s.name.includes(`(${s.kind})`) ? s.name : `${s.name} (${s.kind})`;
}

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Partial<HTMLElementTagNameMap[K]> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  Object.assign(node, props);
  node.append(...children);
  return node;
}

function field(id: string, label: string, control: HTMLElement): HTMLElement {
  control.id = id;
  return element(
    'div',
    { className: 'kk-field' },
    element('label', { htmlFor: id }, label),
    control
  );
}

function perNodeHour(price: IMoney | null): string {
  return price ? ` · ${price.text}/node-h` : '';
}

function option(value: string, label: string): HTMLOptionElement {
  return element('option', { value }, label);
}

// One key per dialog: a repeated Submit (a double click, a retry after a network error) is the same job.
function newIdempotencyKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16)); // also outside secure contexts (plain-http hubs)
  return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
}

export class SubmitForm extends Widget {
  constructor(
    private readonly notebookPath: string,
    private readonly watch: (id: number) => JobWatcher,
    private readonly openExecuted: (watcher: JobWatcher) => Promise<void>
  ) {
    super();
    this.addClass('kk-submit');
    this.idempotencyKey = newIdempotencyKey();
    const form = element('div', { className: 'kk-form' });
    const fields = element('div', { className: 'kk-fields' });
    form.addEventListener('change', event => {
      this.clearRefusal(); // the researcher changed something: the refusal was about what was there before
      if (event.target === this.hardware) {
        this.pickSoftware();
      }
      if (event.target !== this.project) {
        this.estimateSoon(); // a new project first loads its own choices, then estimates
      }
    });
    form.addEventListener('input', event => {
      if ((event.target as HTMLElement).tagName === 'INPUT') {
        this.clearRefusal();
        this.estimateSoon();
      }
    });
    this.project.addEventListener('change', () => void this.loadChoices());
    this.walltime.value = '01:00:00';
    this.walltime.placeholder = '01:30:00, 90m, 2h';
    // The fields scroll when they are taller than the window; the estimate and any refusal stay in view below
    // them, next to the buttons.
    fields.append(
      element('p', { className: 'kk-notebook' }, `Notebook: ${notebookPath}`),
      field('kk-project', 'Project', this.project),
      field('kk-hardware', 'Hardware', this.hardware),
      field('kk-software', 'Software', this.software),
      field('kk-walltime', 'Walltime', this.walltime),
      field('kk-name', 'Job name', this.name),
      this.parameters,
      this.files
    );
    form.append(fields, element('div', { className: 'kk-outcome' }, this.estimate, this.error));
    this.estimate.setAttribute('role', 'status');
    this.estimate.setAttribute('aria-live', 'polite');
    this.error.setAttribute('role', 'alert');
    this.node.append(form);
    this.form = form;
    void this.load();
  }

  private async load(): Promise<void> {
    try {
      const [projects, parameters] = await Promise.all([
        api.projects(),
        api.parameters(this.notebookPath)
      ]);
      this.showParameters(parameters);
      this.showFiles(parameters);
      this.showProjects(projects.projects);
      if (projects.projects.length) {
        await this.loadChoices();
      }
    } catch (error) {
      this.fail(error);
    }
  }

  private showProjects(projects: IProject[]): void {
    if (!projects.length) {
      this.fail(
        new Error('You are not a member of any Kakehashi project yet: ask a project owner to add you.')
      );
      return;
    }
    this.project.replaceChildren(
      ...projects.map(p => option(p.slug, `${p.name} (${p.slug})`))
    );
  }

  private showParameters(notebook: IParameters): void {
    this.name.value = notebook.name;
    const rows = notebook.parameters.map(p => {
      const input = element('input', { value: p.default, type: 'text' });
      input.dataset.parameter = p.name;
      input.dataset.default = p.default;
      return field(`kk-param-${p.name}`, p.name, input);
    });
    const legend = element('legend', {}, 'Parameters');
    this.parameters.replaceChildren(
      legend,
      ...(rows.length
        ? rows
        : [
            element(
              'p',
              { className: 'kk-hint' },
              'No cell tagged "parameters" in this notebook: it runs as it is.'
            )
          ])
    );
  }

  /** The files beside the notebook, to send with it: all chosen while they fit the limits, the rest not. */
  private showFiles(notebook: IParameters): void {
    const legend = element('legend', {}, 'Files sent with the notebook');
    const { files: maxFiles, bytes: maxBytes } = notebook.limits;
    this.limits = notebook.limits;
    let count = 0;
    let total = 0;
    const rows = notebook.beside.map((file: IBesideFile) => {
      const box = element('input', { type: 'checkbox' });
      box.dataset.path = file.path;
      box.dataset.size = String(file.size);
      box.checked = count + 1 <= maxFiles && total + file.size <= maxBytes;
      if (box.checked) {
        count += 1;
        total += file.size;
      }
      box.addEventListener('change', () => this.showFilesSummary());
      const label = element('label', { className: 'kk-file' }, box, ` ${file.path} (${sizeText(file.size)})`);
      return label;
    });
    this.filesSummary.className = 'kk-hint';
    this.files.replaceChildren(
      legend,
      ...(rows.length
        ? [this.filesSummary, element('div', { className: 'kk-file-list' }, ...rows)]
        : [element('p', { className: 'kk-hint' }, 'No other files in the notebook\'s folder: it travels alone.')])
    );
    this.moreFiles = notebook.beside_cut;
    this.showFilesSummary();
  }

  private chosenFiles(): HTMLInputElement[] {
    return Array.from(this.files.querySelectorAll<HTMLInputElement>('input[type=checkbox]')).filter(b => b.checked);
  }

  private showFilesSummary(): void {
    const chosen = this.chosenFiles();
    const total = chosen.reduce((sum, box) => sum + Number(box.dataset.size), 0);
    const limits = this.limits;
    const over = chosen.length > limits.files || total > limits.bytes;
    this.filesSummary.textContent =
      `${chosen.length} file(s), ${sizeText(total)}, go next to the notebook on the cluster ` +
      `(at most ${limits.files} files, ${sizeText(limits.bytes)}).` +
      (over ? ' Too many: choose fewer, or name larger data as a dataset.' : '') +
      (this.moreFiles ? ' The folder holds more files than are listed here.' : '');
    this.filesSummary.classList.toggle('kk-over', over);
  }

  /** The software that runs a notebook on the chosen hardware's cluster: kept if the chosen one does, else the
   * first that provides papermill and the kernel there; "None" only where nothing does (the portal then says why). */
  private pickSoftware(): void {
    const cluster = this.chosenCluster();
    if (!this.choices || !cluster) {
      return;
    }
    const fits = (s: ISoftware | undefined) =>
      !!s && s.clusters.includes(cluster) && NOTEBOOK_NEEDS.every(n => s.provides.includes(n));
    const current = this.choices.software.find(s => s.slug === this.software.value);
    if (fits(current)) {
      return;
    }
    const match = this.choices.software.find(s => fits(s));
    if (match) {
      this.software.value = match.slug;
    }
  }

  private chosenCluster(): string | null {
    const [kind, slug] = this.hardware.value.split(':');
    const hardwareSlug =
      kind === 'preset' ? this.choices?.presets.find(p => p.slug === slug)?.hardware : slug;
    return this.choices?.hardware.find(h => h.slug === hardwareSlug)?.cluster ?? null;
  }

  private async loadChoices(): Promise<void> {
    this.choices = null;
    try {
      const choices = await api.choices(this.project.value);
      this.choices = choices;
      this.software.replaceChildren(
        option('', 'None (the cluster default environment)'),
        ...choices.software.map(s => option(s.slug, softwareLabel(s)))
      );
      const presets = element('optgroup', { label: 'Presets' });
      presets.append(
        ...choices.presets.map(p => {
          const item = option(
            `preset:${p.slug}`,
            p.hardware
              ? `${p.label} — ${p.hardware}${perNodeHour(p.price_per_node_hour)}`
              : `${p.label} — not available to this project`
          );
          item.disabled = !p.hardware;
          return item;
        })
      );
      const all = element('optgroup', { label: 'All hardware (cheapest first)' });
      all.append(
        ...choices.hardware.map(h =>
          option(`hardware:${h.slug}`, `${h.name} (${h.cluster})${perNodeHour(h.price_per_node_hour)}`)
        )
      );
      this.hardware.replaceChildren(presets, all);
      const firstPreset = choices.presets.find(p => p.hardware);
      this.hardware.value = firstPreset
        ? `preset:${firstPreset.slug}`
        : choices.hardware.length
          ? `hardware:${choices.hardware[0].slug}`
          : '';
      this.pickSoftware();
      this.clearRefusal();
      this.error.textContent = '';
      this.estimateSoon(0);
    } catch (error) {
      this.fail(error);
    }
  }

  private request(dryRun: boolean): ISubmitRequest | null {
    const [kind, slug] = this.hardware.value.split(':');
    let hardware = slug;
    let nodes = 1;
    if (kind === 'preset') {
      const preset = this.choices?.presets.find(p => p.slug === slug);
      if (!preset?.hardware) {
        return null;
      }
      hardware = preset.hardware;
      nodes = preset.nodes;
    }
    if (!hardware) {
      return null;
    }
    const parameters: Record<string, string> = {};
    this.parameters.querySelectorAll('input').forEach(input => {
      if (input.value.trim() !== input.dataset.default) {
        parameters[input.dataset.parameter!] = input.value;
      }
    });
    return {
      path: this.notebookPath,
      project: this.project.value,
      name: this.name.value.trim(),
      software: this.software.value,
      hardware,
      nodes,
      walltime: this.walltime.value.trim(),
      parameters,
      files: this.chosenFiles().map(box => box.dataset.path!),
      dry_run: dryRun
    };
  }

  private estimateSoon(delay = ESTIMATE_DELAY_MS): void {
    if (this.submitted) {
      return;
    }
    window.clearTimeout(this.estimateTimer);
    this.estimateTimer = window.setTimeout(() => void this.dryRun(), delay);
  }

  private async dryRun(): Promise<void> {
    const request = this.request(true);
    if (!request) {
      return;
    }
    const asked = ++this.estimates;
    this.estimate.textContent = 'Estimating…';
    try {
      const answer = await api.submit(request, this.idempotencyKey);
      if (asked !== this.estimates) {
        return; // a newer estimate is on its way
      }
      this.showEstimate(answer);
      if (!this.refused) {
        this.error.textContent = ''; // an estimate's own earlier complaint, now answered
      }
    } catch (error) {
      if (asked === this.estimates && !this.refused) {
        this.estimate.textContent = '';
        this.fail(error);
      }
    }
  }

  private showEstimate(answer: ISubmission): void {
    const parts: string[] = [];
    if (answer.estimate) {
      parts.push(`Estimate: ${answer.estimate.text}.`);
    }
    if (answer.budget) {
      parts.push(
        `Budget left: ${answer.budget.text.available} ${answer.budget.unit}, ` +
          `${answer.budget.text.after} ${answer.budget.unit} after this job.`
      );
      if (!answer.budget.fits) {
        parts.push("The project's budget cannot cover this job.");
      }
    } else {
      parts.push('This project has no budget limit.');
    }
    parts.push(...answer.warnings);
    this.estimate.textContent = parts.join(' ');
  }

  /** Submits once; true when the job was recorded (the form then follows it). */
  async submit(): Promise<boolean> {
    if (this.submitted || this.submitting) {
      return this.submitted;
    }
    const request = this.request(false);
    if (!request) {
      this.fail(new Error('Choose hardware this project may use.'));
      return false;
    }
    this.submitting = true;
    // An estimate the last edit set off must not answer after Submit and wipe what Submit says.
    window.clearTimeout(this.estimateTimer);
    this.estimates += 1;
    this.clearRefusal();
    this.error.textContent = '';
    try {
      const answer = await api.submit(request, this.idempotencyKey);
      this.submitted = true;
      this.follow(this.watch(answer.id!), answer);
    } catch (error) {
      // The refusal stays until the researcher changes something (clearRefusal), in view below the fields.
      this.refused = true;
      this.estimate.textContent = '';
      this.fail(error);
      this.error.scrollIntoView({ block: 'nearest' });
    } finally {
      this.submitting = false;
    }
    return this.submitted;
  }

  get isSubmitted(): boolean {
    return this.submitted;
  }

  private follow(watcher: JobWatcher, answer: ISubmission): void {
    const link = element('a', {
      href: answer.link ?? '#',
      target: '_blank',
      rel: 'noopener'
    }, `Open job ${answer.id} in Kakehashi`);
    const state = element('p', { className: 'kk-state' });
    state.setAttribute('role', 'status');
    state.setAttribute('aria-live', 'polite');
    const open = element('button', {
      type: 'button',
      className: 'jp-mod-styled jp-mod-accept',
      hidden: true
    }, 'Open executed notebook');
    open.addEventListener('click', async () => {
      open.disabled = true;
      try {
        await this.openExecuted(watcher);
      } catch (error) {
        this.fail(error);
      } finally {
        open.disabled = false;
      }
    });
    const problem = element('p', { className: 'kk-error' });
    problem.setAttribute('role', 'alert');
    const show = (view: IJobView) => {
      const job = view.job;
      state.textContent = job
        ? `Job ${job.id} is ${job.state.replace('_', ' ')}` +
          (job.ended && job.state_reason && job.state_reason !== job.state ? `: ${job.state_reason}` : '.') +
          (job.ended && !job.executed && !view.done ? ' Waiting for the executed notebook…' : '') +
          (view.done && !job.executed ? ' No executed notebook came back.' : '')
        : `Job ${answer.id} is ${answer.state}.`;
      state.dataset.state = job?.state ?? answer.state;
      open.hidden = !job?.executed;
      problem.textContent = view.problem ?? '';
    };
    show(watcher.view);
    watcher.changed.connect((_, view) => {
      if (!this.isDisposed) {
        show(view);
      }
    });
    this.form.replaceWith(
      element(
        'div',
        { className: 'kk-followup' },
        element('p', {}, `Submitted ${this.notebookPath} as job ${answer.id}.`),
        link,
        state,
        problem,
        open,
        this.error
      )
    );
  }

  private clearRefusal(): void {
    if (this.refused) {
      this.refused = false;
      this.error.textContent = '';
    }
  }

  private fail(error: unknown): void {
    this.error.textContent =
      error instanceof RefusedError || error instanceof Error ? error.message : String(error);
  }

  private readonly form: HTMLDivElement;
  private readonly project = element('select');
  private readonly software = element('select');
  private readonly hardware = element('select');
  private readonly walltime = element('input', { type: 'text' });
  private readonly name = element('input', { type: 'text' });
  private readonly parameters = element('fieldset', { className: 'kk-parameters' });
  private readonly files = element('fieldset', { className: 'kk-parameters kk-files' });
  private readonly filesSummary = element('p', { className: 'kk-hint' });
  private limits = { files: 0, bytes: 0 };
  private moreFiles = false;
  private refused = false;
  private readonly estimate = element('p', { className: 'kk-estimate' });
  private readonly error = element('p', { className: 'kk-error' });
  private readonly idempotencyKey: string;
  private choices: IChoices | null = null;
  private submitted = false;
  private submitting = false;
  private estimates = 0;
  private estimateTimer = 0;
}
