// Training Workspace page: cancel the service after a confirm dialog.
(function () {
  const dialog = document.getElementById("confirm-cancel");
  const open = document.getElementById("cancel-workspace");
  if (open) open.addEventListener("click", () => dialog.showModal());
  document.getElementById("cancel-cancel").addEventListener("click", () => dialog.close());
})();
