// The Data page's direct uploads: files (and folders) go from the browser straight to the object store.
//
// For each file: ask the portal to create the upload (path, size and quota are checked there; your open upload
// to the same path with the same size is handed back, which is how a reloaded page resumes), then Uppy's S3
// multipart plugin sends the parts the store does not hold yet (or holds with other bytes than this file's), each
// through a presigned PUT bound to the part's SHA-256, and the portal completes it with the whole file's SHA-256,
// hashed meanwhile. The page says what it is doing: hashing the first parts (nothing is sent before a part's
// checksum is known), uploading (bytes, speed, time left, and how far the whole file's SHA-256 has got), verifying
// (the portal completes the upload); and "resuming" only when parts of an earlier attempt were found and kept.
// Parts are small (the form's data-part-bytes, asked of the portal at create), so an interrupted upload loses at
// most the few parts in flight.
(() => {
  "use strict";
  const form = document.getElementById("direct-upload");
  if (!form || !window.KakehashiUpload) return;
  const { Uppy, AwsS3, createSHA256 } = window.KakehashiUpload;
  const csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;
  const bar = document.getElementById("upload-bar");
  const status = document.getElementById("upload-status");
  const box = document.getElementById("upload-progress");
  const list = document.getElementById("upload-list");
  const button = form.querySelector("button[type=submit]");
  const READ = 8 * 1024 * 1024;
  const PART_BYTES = Number(form.dataset.partBytes) || 8 * 1024 * 1024;
  const hashed = new Map(); // File -> bytes of it the whole-file SHA-256 has read
  let sending = false; // a byte has reached the store in this batch
  let completing = 0; // uploads whose completion (the portal's checks) is under way
  const partSizes = new WeakMap(); // File -> the part size the portal chose for its upload
  const sayers = new Map(); // Uppy file id -> its line's updater
  const digests = new Map(); // Uppy file id -> promise of the whole file's SHA-256 (hex)
  const verifying = new Set(); // Uppy file ids whose file a worker is still hashing whole in the store
  let hashing = Promise.resolve(); // files are hashed one after another, alongside the uploads

  async function api(method, url, body) {
    const response = await fetch(url, {
      method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.detail || `the portal answered ${response.status}`);
    return data;
  }

  async function sha256(blob, encoding, onProgress) {
    const hasher = await createSHA256();
    hasher.init();
    for (let offset = 0; offset < blob.size; offset += READ) {
      hasher.update(new Uint8Array(await blob.slice(offset, offset + READ).arrayBuffer()));
      if (onProgress) onProgress(Math.min(offset + READ, blob.size));
    }
    if (encoding === "hex") return hasher.digest("hex");
    const bytes = hasher.digest("binary");
    return btoa(String.fromCharCode(...bytes));
  }

  function size(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
  }

  function duration(s) {
    s = Math.round(s);
    if (s >= 3600) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    if (s >= 60) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${s} s`;
  }

  function line(path) {
    const item = document.createElement("li");
    item.className = "small";
    item.dataset.path = path;
    const name = document.createElement("span");
    name.className = "font-monospace";
    name.textContent = path;
    const state = document.createElement("span");
    state.className = "ms-2 upload-state";
    // What was found of an earlier attempt stays in view while the state beside it moves on.
    const note = document.createElement("span");
    note.className = "ms-2 upload-note text-body-secondary";
    item.append(name, state, note);
    list.append(item);
    const say = (text, kind) => {
      state.textContent = text;
      state.className = `ms-2 upload-state ${kind === "error" ? "text-danger" : kind === "done" ? "text-success" : "text-body-secondary"}`;
      item.dataset.state = kind || "";
    };
    say.note = (text) => { note.textContent = `(${text})`; };
    return say;
  }

  const uppy = new Uppy({ autoProceed: false, allowMultipleUploadBatches: true });
  uppy.use(AwsS3, {
    shouldUseMultipart: () => true,
    limit: 4,
    retryDelays: [0, 1000, 3000, 5000],
    getChunkSize: (data) => partSizes.get(data),
    // Uploads are created before Uppy starts (hashed and checked first), so Uppy always takes its resume path:
    // list the parts the store holds, send the others.
    createMultipartUpload: () => { throw new Error("the upload was not created by the portal"); },
    // Parts of an earlier attempt count only if their checksum is this file's: the others are sent again.
    listParts: async (file) => {
      const held = [];
      const partSize = partSizes.get(file.data);
      const say = sayers.get(file.id);
      const inStore = (await api("GET", file.meta.partsUrl)).parts;
      if (inStore.length) say(`checking the ${inStore.length} part(s) already in the store against this file`);
      let kept = 0;
      for (const p of inStore) {
        const start = (p.number - 1) * partSize;
        if (p.sha256 && p.sha256 === await sha256(file.data.slice(start, start + p.size), "base64")) {
          held.push({ PartNumber: p.number, Size: p.size, ETag: p.etag });
          kept += p.size;
        }
      }
      const parts = Math.max(1, Math.ceil(file.size / partSize));
      if (held.length) {
        say("resuming");
        say.note(`resuming: ${held.length} of ${parts} parts (${size(kept)}) kept from the earlier attempt`);
      } else if (file.meta.resumed) {
        say("uploading");
        say.note("starting again: no part of the earlier attempt reached the store");
      }
      return held;
    },
    signPart: async (file, { partNumber, body }) => {
      const checksum = await sha256(body, "base64");
      const signed = await api("POST", file.meta.partsUrl, { parts: [{ number: partNumber, sha256: checksum }] });
      return { method: "PUT", url: signed.parts[0].url, headers: signed.parts[0].headers };
    },
    completeMultipartUpload: async (file, { parts }) => {
      const say = sayers.get(file.id);
      completing += 1;
      try {
        say("sent; finishing the whole file's SHA-256");
        const digest = await digests.get(file.id);
        say("verifying: the portal checks every part's size and checksum in the store");
        const stored = await api("POST", file.meta.completeUrl, {
          sha256: digest,
          parts: parts.filter((p) => p.ETag).map((p) => ({ number: p.PartNumber, etag: p.ETag })),
        });
        if (stored.state === "verifying") verifying.add(file.id);
        return { location: stored.download_url };
      } finally {
        completing -= 1;
      }
    },
    abortMultipartUpload: async (file) => { await api("DELETE", file.meta.uploadUrl); },
  });

  // Progress over every file of the batch: bytes in the store (parts already there count as done at once),
  // speed over the last few seconds of sending, time left at that speed.
  let total = 0;
  const done = new Map();
  let samples = [];
  function showProgress() {
    let sum = 0;
    done.forEach((n) => { sum += n; });
    const now = performance.now();
    samples.push([now, sum]);
    samples = samples.filter(([t]) => now - t < 5000);
    const [t0, b0] = samples[0];
    const speed = now > t0 ? ((sum - b0) * 1000) / (now - t0) : 0;
    const percent = total ? Math.floor((100 * sum) / total) : 100;
    bar.value = percent;
    let hashedSum = 0;
    hashed.forEach((n) => { hashedSum += n; });
    const hashing = hashedSum < total ? ` · whole-file SHA-256 ${Math.floor((100 * hashedSum) / total)} %` : "";
    if (!sending) {
      // Nothing has reached the store yet: each part is hashed before it is signed and sent.
      status.textContent = `Hashing the first parts before sending them${hashing}…`;
      return;
    }
    if (sum >= total && completing) {
      status.textContent = `Verifying: all ${size(total)} sent; the portal checks the parts in the store…`;
      return;
    }
    const left = speed > 0 ? `, ${duration((total - sum) / speed)} left` : "";
    status.textContent = `${percent} % of ${size(total)} · ${size(speed)}/s${left}${hashing}`;
  }
  uppy.on("upload-progress", (file, progress) => {
    done.set(file.id, progress.bytesUploaded);
    if (progress.bytesUploaded > 0 && !sending) {
      sending = true;
      if (!file.meta.resumed) sayers.get(file.id)("uploading");
    }
    showProgress();
  });
  uppy.on("upload-success", (file) => {
    done.set(file.id, file.size);
    // A file of several parts is hashed whole in the store by a worker before it is ready (the list says when).
    sayers.get(file.id)(verifying.has(file.id) ? "uploaded; its SHA-256 is being verified" : "uploaded", "done");
    showProgress();
  });
  uppy.on("upload-error", (file, error) => {
    sayers.get(file.id)(`failed: ${error.message}. Choose the file again to resume.`, "error");
  });

  function chosenFiles() {
    const dest = form.querySelector("[name=dest]").value.trim().replace(/^\/+/, "");
    const prefix = dest && !dest.endsWith("/") ? `${dest}/` : dest;
    const files = [];
    for (const input of form.querySelectorAll("input[type=file]")) {
      for (const file of input.files) files.push([file, prefix + (file.webkitRelativePath || file.name)]);
    }
    return files;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const project = form.querySelector("[name=project]").value;
    const overwrite = form.querySelector("[name=overwrite]").checked;
    const files = chosenFiles();
    if (!files.length) {
      status.textContent = "Choose files or a folder first.";
      box.hidden = false;
      return;
    }
    button.disabled = true;
    box.hidden = false;
    list.replaceChildren();
    uppy.clear();
    sayers.clear();
    digests.clear();
    total = 0;
    sending = false;
    hashed.clear();
    done.clear();
    samples = [];
    bar.value = 0;
    const started = performance.now();
    let ready = 0;
    for (const [file, path] of files) {
      const say = line(path);
      try {
        const upload = await api("POST", `/api/v1/projects/${encodeURIComponent(project)}/uploads/`,
          { path, size: file.size, overwrite, part_size: PART_BYTES });
        if (upload.state === "completed") { say("uploaded", "done"); continue; }
        partSizes.set(file, upload.part_size);
        const id = uppy.addFile({
          name: path, type: file.type, data: file, source: "data-page",
          meta: { uploadUrl: upload.parts_url.replace(/parts\/$/, ""), partsUrl: upload.parts_url,
                  completeUrl: upload.complete_url, resumed: upload.resumed },
        });
        uppy.setFileState(id, { s3Multipart: { uploadId: upload.id, key: upload.path } });
        sayers.set(id, say);
        hashed.set(file, 0);
        hashing = hashing.catch(() => null).then(() => sha256(file, "hex", (n) => { hashed.set(file, n); }));
        digests.set(id, hashing);
        total += file.size;
        ready += 1;
        // "Resuming" is said only once the parts in the store have been checked and some were kept (listParts).
        say(upload.resumed ? "looking for the parts of the earlier attempt" : "hashing its first parts");
      } catch (error) {
        say(error.message, "error");
      }
    }
    if (ready) {
      showProgress();
      // Also when nothing arrives: a stalled connection shows its speed falling, not the last one seen.
      const ticker = setInterval(showProgress, 1000);
      try {
        await uppy.upload();
      } finally {
        clearInterval(ticker);
      }
    }
    const failed = list.querySelectorAll("[data-state=error]").length;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    if (!failed) bar.value = 100;
    status.textContent = failed
      ? `${failed} of ${files.length} file(s) not uploaded: see below.`
      : `Uploaded ${files.length} file(s), ${size(total)}, in ${seconds} s.`;
    button.disabled = false;
    form.querySelectorAll("input[type=file]").forEach((input) => { input.value = ""; });
    if (window.htmx) {
      window.htmx.ajax("GET", `${window.location.pathname}?project=${encodeURIComponent(project)}`,
        { target: "#file-list", select: "#file-list", swap: "outerHTML" });
    }
  });
})();
