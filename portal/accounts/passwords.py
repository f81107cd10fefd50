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


class MostlyUsernameValidator:
    """Refuses a password that is mostly the user's own name or address ("victimvictim", "Victim!2024").

    Django's UserAttributeSimilarityValidator compares the whole password with each attribute, so a
    repeated name ("victimvictim": ratio 0.67) passes its 0.7 bar. Here every occurrence of the
    username (and of the address's local part) is taken out; if less than half the password is left,
    the rest was padding.
    """

    ATTRIBUTES = ("username", "email")
    SHORTEST_WORD = 3  # a two-letter username would rule out most passwords that happen to contain it

    def validate(self, password: str, user=None) -> None:
        if user is None:
            return
        lowered = password.lower()
        for attribute in self.ATTRIBUTES:
            value = str(getattr(user, attribute, "") or "").lower()
            if attribute == "email":
                value = value.partition("@")[0]
            if len(value) < self.SHORTEST_WORD or value not in lowered:
                continue
            if len(lowered.replace(value, "")) * 2 < len(lowered):
                raise ValidationError(
                    "The password is mostly your %(attribute)s; add words of your own.",
                    code="password_too_similar",
                    params={"attribute": "username" if attribute == "username" else "e-mail address"},
                )

    def get_help_text(self) -> str:
        return "Your password can't be mostly your username or e-mail address."
