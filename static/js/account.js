// The account page: reveal the secret key on click, confirm a rotation, upload with a progress bar.
(function () {
  const reveal = document.getElementById("reveal-secret");
  if (reveal) {
    reveal.addEventListener("click", async () => {
      reveal.disabled = true;
      try {
        const answer = await fetch(reveal.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
        const body = await answer.json();
        if (!answer.ok) throw new Error(body.detail || answer.statusText);
        document.querySelectorAll(".secret-slot").forEach((slot) => { slot.textContent = body.secret_key; });
        reveal.hidden = true;
      } catch (error) {
        reveal.disabled = false;
        document.getElementById("storage-secret").textContent = "could not be read: " + error.message;
      }
    });
  }

  const rotate = document.getElementById("rotate-form");
  if (rotate) {
    rotate.addEventListener("submit", (event) => {
      if (!window.confirm("Rotate your storage keys? The current access key and secret stop working at once.")) {
        event.preventDefault();
      }
    });
  }

  const form = document.getElementById("upload-form");
  if (!form) return;
  const progress = document.getElementById("upload-progress");
  const status = document.getElementById("upload-status");
  const button = document.getElementById("upload-button");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const request = new XMLHttpRequest();
    request.open("POST", form.action);
    request.setRequestHeader("Accept", "application/json");
    request.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) {
        progress.value = Math.round((e.loaded / e.total) * 100);
        status.textContent = progress.value + " %";
      }
    });
    request.addEventListener("load", () => {
      button.disabled = false;
      let body = {};
      try { body = JSON.parse(request.responseText); } catch (e) { body = { error: "The console answered " + request.status }; }
      if (body.url) {
        progress.value = 100;
        status.textContent = "Done";
        document.getElementById("upload-url").textContent = body.url;
        document.getElementById("upload-result").hidden = false;
      } else {
        progress.hidden = true;
        status.textContent = body.error || "The upload failed (" + request.status + ")";
      }
    });
    request.addEventListener("error", () => {
      button.disabled = false;
      progress.hidden = true;
      status.textContent = "The upload failed: the console did not answer";
    });
    progress.value = 0;
    progress.hidden = false;
    button.disabled = true;
    document.getElementById("upload-result").hidden = true;
    status.textContent = "0 %";
    request.send(new FormData(form));
  });
})();
