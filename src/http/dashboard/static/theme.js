/**
 * Light or dark: the system's choice (`prefers-color-scheme`, which style.css follows by itself)
 * until the operator picks one with the header's toggle; that choice is kept in localStorage
 * (`uexec.theme`: `light` or `dark`) and set as `data-theme` on the root element. It must never
 * store anything but that one word.
 *
 * @module
 */

const KEY = "uexec.theme";
const dark = matchMedia("(prefers-color-scheme: dark)");

/** The theme in force: the stored choice, else the system's. */
function current() {
  const chosen = localStorage.getItem(KEY);
  if (chosen === "light" || chosen === "dark") return chosen;
  return dark.matches ? "dark" : "light";
}

/** Apply the stored choice and wire `button` to switch and remember. */
export function initTheme(button) {
  const show = () => {
    const theme = current();
    const chosen = localStorage.getItem(KEY);
    if (chosen === "light" || chosen === "dark") document.documentElement.dataset.theme = chosen;
    else delete document.documentElement.dataset.theme;
    button.textContent = theme === "dark" ? "Light" : "Dark";
    button.title = `Switch to the ${theme === "dark" ? "light" : "dark"} theme`;
    button.setAttribute("aria-pressed", String(theme === "dark"));
  };
  button.addEventListener("click", () => {
    localStorage.setItem(KEY, current() === "dark" ? "light" : "dark");
    show();
  });
  dark.addEventListener("change", show);
  show();
}
