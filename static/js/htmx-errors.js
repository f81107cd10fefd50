// How an HTMX panel reports an error (docs/development/front-end.md), with base.html's htmx-config:
//   a 4xx answer that is a fragment is swapped into its target like a 2xx (responseHandling): the view
//     renders its own message there (a form with its errors, an alert) and keeps its honest status;
//   a 4xx that is a whole page (Django's 403/404/405, a CSRF failure), a 5xx, a network failure or a
//     timeout swaps nothing: one calm message says so in #htmx-messages, under the page's messages.
// A file, not inline script: the Content-Security-Policy allows none.
(function () {
  "use strict";

  const WHY = {
    403: "You may not do that, or your session has ended: reload the page (or log in again) and retry.",
    404: "What this part of the page shows no longer exists: reload the page.",
    405: "The server refused this kind of request: reload the page and retry.",
    410: "What this part of the page shows is gone: reload the page.",
    429: "Too many requests at once: wait a few seconds and retry.",
  };

  // A fragment to swap: HTML that is not a whole document (<!doctype …> or <html …>).
  function isFragment(xhr) {
    const type = xhr.getResponseHeader("Content-Type") || "";
    return type.startsWith("text/html") && !/^\s*(<!doctype|<html)/i.test(xhr.responseText || "");
  }

  // The element that made the request (detail.elt is where the event fires, an ancestor once it is swapped out).
  function source(event) {
    return (event.detail.requestConfig || {}).elt || event.detail.elt;
  }

  let failedAt = null; // the element whose request the message is about

  function show(elt, text) {
    failedAt = elt;
    const box = document.getElementById("htmx-messages");
    if (!box) return;
    const item = document.createElement("li");
    item.className = "error";
    item.textContent = text; // one message at a time: the latest failure
    box.replaceChildren(item);
    box.hidden = false;
  }

  function clear() {
    failedAt = null;
    const box = document.getElementById("htmx-messages");
    if (box && !box.hidden) {
      box.hidden = true;
      box.replaceChildren();
    }
  }

  function statusMessage(status) {
    if (status >= 500) {
      return `The server could not answer (HTTP ${status}): this part of the page was not updated. Try again in a moment.`;
    }
    return `Not done (HTTP ${status}). ${WHY[status] || "Reload the page and retry."}`;
  }

  document.addEventListener("htmx:beforeSwap", (event) => {
    const detail = event.detail;
    const status = detail.xhr.status;
    if (status >= 400 && status < 500 && detail.shouldSwap && !isFragment(detail.xhr)) {
      detail.shouldSwap = false; // a whole error page would land inside the panel
    }
    detail.xhr.plimsollSwapped = detail.shouldSwap;
  });

  document.addEventListener("htmx:responseError", (event) => {
    const xhr = event.detail.xhr;
    if (!xhr.plimsollSwapped) show(source(event), statusMessage(xhr.status));
  });

  document.addEventListener("htmx:sendError", (event) =>
    show(source(event), "The server could not be reached: this part of the page was not updated. Check the connection and try again."),
  );
  document.addEventListener("htmx:timeout", (event) =>
    show(source(event), "The server took too long to answer: this part of the page was not updated. Try again in a moment."),
  );

  // The message goes when the same element's request succeeds later (a retried form, the next poll);
  // another panel's success (a poll elsewhere on the page) does not hide it before it is read.
  document.addEventListener("htmx:afterRequest", (event) => {
    if (event.detail.successful && source(event) === failedAt) clear();
  });
})();
