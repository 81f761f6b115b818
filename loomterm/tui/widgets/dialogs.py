"""Small modal dialogs: a yes/no confirmation, a new chat, a new chat turn; and the
bases every dialog shares: :class:`DialogScreen` (focus moves in the order they were
typed) and :class:`FormScreen` (the submit-or-cancel behaviour of the form dialogs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Generic

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, ScreenResultType
from textual.widgets import Button, Label

from loomterm.tui.key_order import FOCUS_BINDINGS, hand_on
from loomterm.tui.sanitize import safe_text
from loomterm.tui.widgets.fields import Field, FieldArea, FieldForm

DEFAULT_SYSTEM = "You are a helpful assistant."

NameCheck = Callable[[str], "str | None"]
"""Why a name cannot be taken (a session of that name exists...), or None."""

DIALOG_CSS = """
    align: center middle;
    & > Vertical {
        width: 72;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        overflow-y: auto;  /* a terminal smaller than the dialog scrolls it */
        border: thick $primary 60%;
        background: $surface;
        padding: 1 2;
    }
    & .dialog--title { width: 100%; text-style: bold; color: $primary; margin-bottom: 1; }
    & .dialog--hint { width: 100%; color: $text-muted; margin-top: 1; }
    & .dialog--buttons { height: auto; align-horizontal: right; margin-top: 1; }
    & .dialog--buttons Button { margin-left: 1; }
    /* Compact fields have no border: a box of their own shows where to type, and a
       focused list shows by reverse video (a 5% tint alone is lost in 16 colours). */
    & Input.-textual-compact { background: $boost; }
    & Select.-textual-compact:focus > SelectCurrent { text-style: reverse; }
"""


def dialog_css(screen: str, rules: str = "") -> str:
    """The CSS of the dialog ``screen`` (its class name): :data:`DIALOG_CSS`, then
    ``rules`` of its own (nested, as ``& .row { ... }``)."""
    return f"{screen} {{{DIALOG_CSS}{rules}}}"


def dialog_title(text: str) -> Label:
    """A dialog's title, through the sanitiser: titles name outside things (a server,
    a session, a token)."""
    return Label(safe_text(text), classes="dialog--title", markup=False)


def form_bindings(name: str, submit: str = "", submit_id: str = "") -> list[BindingType]:
    """A form dialog's own keys: escape cancels (id ``{name}_cancel``), and with
    ``submit`` ctrl+s submits (shown as ``submit``, id ``submit_id``). The ids are what
    a keymap file names."""
    keys: list[BindingType] = [Binding("escape", "cancel", "Cancel", id=f"{name}_cancel")]
    if submit:
        keys.append(Binding("ctrl+s", "submit", submit, id=submit_id))
    return keys


class DialogScreen(ModalScreen[ScreenResultType], Generic[ScreenResultType]):
    """A modal dialog whose keys apply in the order they were typed
    (``loomterm.tui.key_order``): tab and shift+tab move the focus as the app reads
    them, so the keys after them reach the field they were typed for (with Textual's
    own tab, tab, tab, backspace, "400" typed at speed went into a field the scheduler
    chose, 5 bursts in 40 in tmux); a key that bubbles up here after the dialog closed
    goes on to what has the focus now."""

    BINDINGS: ClassVar[list[BindingType]] = list(FOCUS_BINDINGS)

    def on_key(self, event: events.Key) -> None:
        # A key that bubbled up here after the dialog closed (typed right after the
        # key that closed it) belongs to what has the focus now.
        hand_on(self, event)

    def filled(self, field_id: str, missing: str, check: NameCheck | None = None) -> str | None:
        """What the field ``#field_id`` holds, stripped; None, with ``missing`` said as
        a warning, when it is empty, or with ``check``'s problem said (the dialog stays
        open, the text as it was typed)."""
        value = self.query_one(f"#{field_id}", Field).value.strip()
        if not value:
            self.notify(missing, severity="warning")
            return None
        problem = check(value) if check is not None else None
        if problem:
            self.notify(problem, severity="error")
            return None
        return value


class FormScreen(DialogScreen[ScreenResultType], FieldForm, Generic[ScreenResultType]):
    """A form dialog: its submit button (id ``SUBMIT``), its own key bound to
    ``submit``, and (with ``SUBMIT_ON_ENTER``) enter in one of its inputs run
    :meth:`action_submit`, which checks the form and dismisses with its result or says what
    is missing; any other button and escape (``cancel``) dismiss it with None."""

    SUBMIT: ClassVar[str] = "ok"
    SUBMIT_ON_ENTER: ClassVar[bool] = True

    def action_submit(self) -> None:
        """Check the form; dismiss with its result, or say what is wrong and stay."""
        raise NotImplementedError

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == self.SUBMIT:
            self.action_submit()
        else:
            self.dismiss(None)

    def field_submitted(self, field: Field) -> None:
        if self.SUBMIT_ON_ENTER:
            self.action_submit()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def buttons(self, submit: str) -> Horizontal:
        """The form's buttons: Cancel, then ``submit``, the primary one (id ``SUBMIT``)."""
        return Horizontal(
            Button("Cancel", id="cancel", compact=True),
            Button(submit, id=self.SUBMIT, variant="primary", compact=True),
            classes="dialog--buttons",
        )


class ConfirmScreen(DialogScreen[bool]):
    """Ask a yes/no question; dismisses with True for yes."""

    DEFAULT_CSS = dialog_css("ConfirmScreen")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm_yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm_no"),
    ]

    def __init__(self, question: str, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.question = question
        self.yes = yes
        self.no = no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title(self.question)
            with Horizontal(classes="dialog--buttons"):
                yield Button(self.no, id="no", compact=True)
                yield Button(self.yes, id="yes", variant="warning", compact=True)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


@dataclass(frozen=True)
class ChatRequest:
    """What the new-chat dialog asked for."""

    system: str
    user: str
    name: str = ""
    generate: bool = True


class ChatScreen(FormScreen["ChatRequest | None"]):
    """A new chat: a system message and the first user message."""

    SUBMIT = "start"
    SUBMIT_ON_ENTER = False  # enter in the name field is no start: the messages follow

    DEFAULT_CSS = dialog_css(
        "ChatScreen",
        """
        & TextArea { height: 4; }  /* the dialog fits 80x24 */
        & #user { height: 5; }
    """,
    )
    BINDINGS: ClassVar[list[BindingType]] = form_bindings("chat", "Start", "chat_start")

    def __init__(self, system: str = DEFAULT_SYSTEM) -> None:
        super().__init__()
        self.system = system

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("New chat")
            yield Label("Session name (empty: a new name from the time)")
            yield Field(placeholder="chat-…", id="name", compact=True)
            yield Label("System message")
            yield FieldArea(self.system, id="system", soft_wrap=True)
            yield Label("User message")
            yield FieldArea("", id="user", soft_wrap=True)
            yield self.buttons("Start and generate")
            yield Label("ctrl+s starts · escape cancels", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#name", Field).focus()  # the first field: typing goes where it shows

    def action_submit(self) -> None:
        user = self.query_one("#user", FieldArea).text.strip()
        if not user:
            self.notify("Write the user message first", severity="warning")
            return
        self.dismiss(
            ChatRequest(
                system=self.query_one("#system", FieldArea).text.strip(),
                user=user,
                name=self.query_one("#name", Field).value.strip(),
            )
        )


@dataclass(frozen=True)
class TurnRequest:
    """A new user turn, and whether to generate the answer at once."""

    text: str
    generate: bool


class TurnScreen(DialogScreen["TurnRequest | None"]):
    """Add a user turn to a chat."""

    DEFAULT_CSS = dialog_css("TurnScreen", "& TextArea { height: 7; }")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="turn_cancel"),
        Binding("ctrl+s", "add(True)", "Add and generate", id="turn_add"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title("Add a user turn")
            yield FieldArea("", id="turn", soft_wrap=True)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Cancel", id="cancel", compact=True)
                yield Button("Add", id="add", compact=True)
                yield Button("Add and generate", id="add-generate", variant="primary", compact=True)
            yield Label("ctrl+s adds and generates · escape cancels", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one(FieldArea).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self.action_add(event.button.id == "add-generate")

    def action_add(self, generate: bool) -> None:
        text = self.query_one(FieldArea).text.strip()
        if not text:
            self.notify("Write the turn first", severity="warning")
            return
        self.dismiss(TurnRequest(text, generate))

    def action_cancel(self) -> None:
        self.dismiss(None)


class SaveAsScreen(DialogScreen["str | None"], FieldForm):
    """Quitting a read-only session that was changed: save the changes as a new
    session, or quit without them. Dismisses with the new session's name, ``""`` to
    quit without saving, or None to stay."""

    DEFAULT_CSS = dialog_css("SaveAsScreen", "& Input { margin-bottom: 1; }")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stay", "Stay", id="save_as_stay"),
    ]

    def __init__(self, session: str, name: str, check: NameCheck | None = None) -> None:
        super().__init__()
        self.session = session
        self.name_value = name
        self.check = check

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title(f"{self.session!r} is open read-only: your changes are not saved.")
            yield Label("Save them as a new session named")
            yield Field(self.name_value, id="name", compact=True)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Stay", id="stay", compact=True)
                yield Button("Quit without saving", id="discard", variant="error", compact=True)
                yield Button("Save and quit", id="save", variant="primary", compact=True)
            yield Label("enter saves · escape stays in the editor", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#name", Field).focus()

    def field_submitted(self, field: Field) -> None:
        self._save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self._save()
        elif event.button.id == "discard":
            self.dismiss("")
        else:
            self.dismiss(None)

    def _save(self) -> None:
        name = self.filled("name", "Name the new session", self.check)
        if name is not None:
            self.dismiss(name)

    def action_stay(self) -> None:
        self.dismiss(None)


class NameScreen(FormScreen["str | None"]):
    """Ask for a name (a new session, a rename); dismisses with it, or None."""

    MISSING: ClassVar[str] = "Write a name first"
    """What an empty name is told."""

    DEFAULT_CSS = dialog_css("NameScreen")
    BINDINGS: ClassVar[list[BindingType]] = form_bindings("name")

    def __init__(
        self, title: str, value: str = "", action: str = "OK", check: NameCheck | None = None
    ) -> None:
        super().__init__()
        self.title_text = title
        self.value = value
        self.action = action
        self.check = check

    def compose(self) -> ComposeResult:
        with Vertical():
            yield dialog_title(self.title_text)
            yield Field(self.value, id="name", compact=True)
            yield self.buttons(self.action)
            yield Label("enter confirms · escape cancels", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#name", Field).focus()

    def action_submit(self) -> None:
        name = self.filled("name", self.MISSING, self.check)
        if name is not None:
            self.dismiss(name)
