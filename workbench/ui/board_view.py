"""The notebook face of :class:`~workbench.human.BoardPlay`: a board game as buttons a person clicks.

Each square is a button (Tic-Tac-Toe: the square; Connect Four: any square of a column drops a piece
there); a click is the person's move, and the agent's reply is drawn with it. A line above says whose
move it is and how the game ended; "New game" starts the next one (the seats swap); the tally counts
the person's wins, draws and losses, every finished game being recorded as a demonstration.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

__all__ = ["BoardView"]

_MARKS = {0: ("", None), 1: ("X", "#9ecbff"), 2: ("O", "#ffb3b3")}
_DISCS = {0: ("", None), 1: ("●", "#ffe066"), 2: ("●", "#ff6b6b")}


class BoardView(widgets.VBox):
    """The widget of ``play`` (a :class:`~workbench.human.BoardPlay`): status, board, new-game button, tally."""

    def __init__(self, play: Any) -> None:
        self.play = play
        self.status = widgets.HTML()
        self.status.add_class("wb-board-status")
        size = "48px"
        self.squares: list[list[widgets.Button]] = []
        for r in range(play.rows):
            row = []
            for c in range(play.cols):
                button = widgets.Button(description="", layout=widgets.Layout(width=size, height=size))
                button.add_class("wb-board-square")
                button.add_class(f"wb-square-{r}-{c}")
                button.on_click(lambda _b, r=r, c=c: self._clicked(r, c))
                row.append(button)
            self.squares.append(row)
        self.grid = widgets.GridBox(
            [b for row in self.squares for b in row],
            layout=widgets.Layout(grid_template_columns=f"repeat({play.cols}, {size})", grid_gap="2px"),
        )
        self.new_game = widgets.Button(description="New game")
        self.new_game.add_class("wb-board-new")
        self.new_game.on_click(lambda _b: self.play.new_game())
        self.tally = widgets.HTML()
        self.tally.add_class("wb-board-tally")
        super().__init__([self.status, self.grid, widgets.HBox([self.new_game, self.tally])])
        self.add_class("wb-board-play")
        play._listeners.append(self.draw)
        self.draw()

    def _clicked(self, row: int, col: int) -> None:
        self.play.click(row, col)

    def draw(self) -> None:
        """Draw the board, the status and the tally (BoardPlay calls this after every move)."""
        play = self.play
        board = play.board()
        legal = play.legal
        marks = _DISCS if play.columns else _MARKS
        with self.hold_sync():
            for r, row in enumerate(self.squares):
                for c, button in enumerate(row):
                    text, colour = marks[int(board[r, c])]
                    button.description = text
                    button.style.button_color = colour
                    button.disabled = not legal[play.action_at(r, c)] or int(board[r, c]) != 0
            self.status.value = f"<b>{html.escape(play.status())}</b>"
            res = play.results
            self.tally.value = (
                f"<span style='font-family:monospace'>you: {res['wins']} won, {res['draws']} drawn, "
                f"{res['losses']} lost; {play.episodes} games recorded</span>"
            )
