from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=``: 50 rows by default, 200 at most."""

    default_limit = 50
    max_limit = 200
