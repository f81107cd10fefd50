// Sortable columns of a comparison's per-page table: a header cell with class "sortable" holds a
// button; clicking it orders the rows by that column's data-sort value (the signed change in %),
// largest first, then smallest first on a second click. Rows without a value stay last.
(function () {
  "use strict";
  for (const table of document.querySelectorAll("table.sortable-table")) {
    const body = table.tBodies[0];
    for (const th of table.querySelectorAll("th.sortable")) {
      const button = th.querySelector("button");
      if (!button) continue;
      button.addEventListener("click", () => {
        const descending = th.getAttribute("aria-sort") !== "descending";
        for (const other of table.querySelectorAll("th.sortable")) other.removeAttribute("aria-sort");
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        const column = th.cellIndex;
        const value = (row) => {
          const text = row.cells[column] ? row.cells[column].dataset.sort : "";
          return text === "" || text === undefined ? null : Number(text);
        };
        const rows = Array.from(body.rows);
        rows.sort((a, b) => {
          const x = value(a), y = value(b);
          if (x === null || y === null) return (x === null) - (y === null);
          return descending ? y - x : x - y;
        });
        for (const row of rows) body.append(row);
      });
    }
  }
})();
