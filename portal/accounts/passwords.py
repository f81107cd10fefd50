"""Password rules beyond Django's own validators (configured in settings.AUTH_PASSWORD_VALIDATORS)."""

from difflib import SequenceMatcher

from django.core.exceptions import ValidationError

# Words anyone guessing a password here tries first: the product's own name and its domain's.
SITE_WORDS = ("plimsoll", "loadtest", "soaktest")


class SiteWordsValidator:
    """Refuses a password that is mostly one of SITE_WORDS ("Plimsoll", "plimsoll2024").

    Same measure as Django's UserAttributeSimilarityValidator (difflib ratio over the
    lower-cased password), against the words of this site instead of the user's fields.
    """

    def __init__(self, max_similarity: float = 0.7):
        self.max_similarity = max_similarity

    def validate(self, password: str, user=None) -> None:
        lowered = password.lower()
        for word in SITE_WORDS:
            # Containing the word and little else ("plimsoll2024") is as weak as resembling it ("Plimsol1").
            mostly_the_word = word in lowered and len(word) * 2 >= len(lowered)
            if mostly_the_word or SequenceMatcher(a=lowered, b=word).ratio() >= self.max_similarity:
                raise self._error(word)

    def _error(self, word: str) -> ValidationError:
        return ValidationError(
            f"This password is too close to “{word}”, a word anyone guessing here tries first.",
            code="password_too_similar",
        )

    def get_help_text(self) -> str:
        return "Your password can't be mostly the name of this site."
