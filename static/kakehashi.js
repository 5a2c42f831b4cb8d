// Job form helpers: presets fill the hardware and node fields; the advanced editor starts from the preview.
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("job-form");
  if (!form) return;
  const hardware = form.querySelector("[name=hardware]");
  const nodes = form.querySelector("[name=nodes]");
  // Delegated: the presets are swapped in again when the project changes.
  form.addEventListener("click", (event) => {
    // A preset, or "Use" on a row of the comparison of places (jobs/_places.html).
    const button = event.target.closest("button.preset, button.use-place");
    if (!button) return;
    hardware.value = button.dataset.hardware;
    nodes.value = button.dataset.nodes;
    form.querySelectorAll("button.preset").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
    hardware.dispatchEvent(new Event("change", { bubbles: true }));
  });
  const copy = document.getElementById("copy-preview");
  if (copy) {
    copy.addEventListener("click", () => {
      const preview = document.getElementById("script-preview");
      const target = form.querySelector("[name=edited_script]");
      if (preview && target) target.value = preview.textContent;
    });
  }
});

// A template says what it needs (data-requires, e.g. "torch"): pick Software that provides it on the chosen
// hardware's cluster, unless the software chosen already does. If none does, the preview says why.
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("job-form");
  if (!form) return;
  const template = form.querySelector("[name=template]");
  const hardware = form.querySelector("[name=hardware]");
  const software = form.querySelector("[name=software]");
  if (!template || !hardware || !software) return;
  const words = (text) => (text || "").split(" ").filter(Boolean);
  const fits = (option, needs, cluster) => option.value !== ""
    && needs.every((need) => words(option.dataset.provides).includes(need))
    && words(option.dataset.clusters).includes(cluster);
  const pick = () => {
    const needs = words(template.selectedOptions[0] && template.selectedOptions[0].dataset.requires);
    const chosen = hardware.selectedOptions[0];
    if (!needs.length || !chosen || !chosen.dataset.cluster) return;
    const current = software.selectedOptions[0];
    if (current && fits(current, needs, chosen.dataset.cluster)) return;
    const match = Array.from(software.options).find((option) => fits(option, needs, chosen.dataset.cluster));
    if (match) software.value = match.value;
  };
  // Capture phase: the software is chosen before htmx (listening on the form) asks for the preview.
  form.addEventListener("change", (event) => {
    if (event.target === template || event.target === hardware) pick();
  }, true);
  pick();
});

// "Use" a template: reload the form with it, keeping the project.
document.addEventListener("DOMContentLoaded", () => {
  const use = document.getElementById("use-template");
  const select = document.querySelector("#job-form [name=template]");
  if (!use || !select) return;
  use.addEventListener("click", (event) => {
    event.preventDefault();
    const url = new URL(window.location.href);
    url.searchParams.set("template", select.value);
    window.location.assign(url);
  });
});

// Job page: the status card is replaced every 2 s (htmx); say a change of state once, in a live region.
document.addEventListener("DOMContentLoaded", () => {
  const status = document.getElementById("job-status");
  const announcer = document.getElementById("job-announcer");
  if (!status || !announcer) return;
  const stateOf = () => status.querySelector("[data-state]");
  let last = stateOf() ? stateOf().dataset.state : "";
  status.addEventListener("htmx:afterSwap", () => {
    const badge = stateOf();
    if (!badge || badge.dataset.state === last) return;
    last = badge.dataset.state;
    announcer.textContent = `The job is now ${badge.textContent.trim().toLowerCase()}.`;
  });
});

// Sizes as everywhere in the portal (portal/storage/quota.py size_text): binary units, named as such.
function sizeText(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

// Upload progress on the Data page. htmx reports the upload's progress and then the answer's download under
// the same event name: follow only the first run of events after the request starts, up to 100 %.
let uploading = false;
document.addEventListener("htmx:beforeRequest", (event) => {
  if (event.target.id === "upload-form") uploading = true;
});
document.addEventListener("htmx:xhr:progress", (event) => {
  if (!uploading || event.target.id !== "upload-form" || !event.detail.lengthComputable) return;
  const percent = Math.round((event.detail.loaded / event.detail.total) * 100);
  document.getElementById("upload-progress").hidden = false;
  document.getElementById("upload-bar").value = percent;
  document.getElementById("upload-status").textContent = `${percent} % of ${sizeText(event.detail.total)} sent`;
  if (event.detail.loaded >= event.detail.total) uploading = false;
});
// A refused upload answers 400 with the form and its messages: show them (htmx leaves 4xx unswapped by default).
document.addEventListener("htmx:beforeSwap", (event) => {
  if (event.target.closest && event.target.closest("#main") && event.detail.requestConfig
      && event.detail.requestConfig.elt && event.detail.requestConfig.elt.id === "upload-form"
      && [400, 413].includes(event.detail.xhr.status)) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// The Content-Security-Policy allows no inline script or event handler: these data attributes stand in for them.
// <select data-autosubmit> submits its form when changed; <form data-confirm="…"> asks before it is sent;
// <input data-select-on-focus> selects its whole value (a secret shown once, to copy).
document.addEventListener("change", (event) => {
  const field = event.target.closest && event.target.closest("[data-autosubmit]");
  if (field && field.form) field.form.submit();
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset && event.target.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }
}, true);
document.addEventListener("focusin", (event) => {
  if (event.target.matches && event.target.matches("[data-select-on-focus]")) event.target.select();
});

// The job form's choices follow the project: hardware the chosen project may not use and other projects'
// datasets are hidden, and a choice made for another project is dropped (so Run is never refused for it).
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("job-form");
  if (!form) return;
  const project = form.querySelector("[name=project]");
  const hardware = form.querySelector("[name=hardware]");
  const datasets = form.querySelector("[name=datasets]");
  if (!project) return;
  const follow = (initial) => {
    const chosen = project.value;
    if (hardware) {
      let dropped = false;
      for (const option of hardware.options) {
        if (!option.value || option.dataset.projects === undefined || option.dataset.projects === "") continue;
        const allowed = option.dataset.projects.split(" ").includes(chosen);
        option.hidden = !allowed;
        option.disabled = !allowed;
        if (!allowed && option.selected) { option.selected = false; dropped = true; }
      }
      for (const group of hardware.querySelectorAll("optgroup")) {
        group.hidden = !Array.from(group.children).some((option) => !option.hidden);
      }
      if (dropped && !initial) hardware.dispatchEvent(new Event("change", { bubbles: true }));
    }
    if (datasets) {
      for (const option of datasets.options) {
        const allowed = option.dataset.project === chosen;
        option.hidden = !allowed;
        option.disabled = !allowed;
        if (!allowed) option.selected = false;
      }
    }
  };
  // Capture phase: the choices are fixed before htmx (listening on the form) asks for the preview.
  project.addEventListener("change", () => follow(false), true);
  follow(true);
});
