"""Notification channels and their deliveries through the API (issue 24.6): configuration as code.

The same rules as the channels page: a body passes the page's form (``ChannelForm`` to create,
``ChannelEditForm`` to change) and is saved by ``services.channel_create`` / ``channel_update``.
A webhook's signing secret is in the answer of the call that made it (creation, or a change with
``replace_secret``) and never again. An e-mail channel's addresses get the page's confirmation
mail; deliveries go only to confirmed addresses (``addresses``): the API cannot skip that.
"""

from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.accounts import access
from portal.api.base import ListByCodes, PartialUpdateMixin, QueryParams, StrictSerializer, TeamScopedViewSet
from portal.api.errors import error_responses, write_schemas
from portal.common import Invalid
from portal.projects.models import Project

from . import addresses, selectors, services
from .forms import ChannelEditForm, ChannelForm
from .models import Channel, Delivery, Event

DELIVERY_LOG = 100
# The start of a receiver's answer, to editors and owners only (the channels page shows as much): it is
# whatever the receiving server said, so a viewer reads a delivery's status and error only (issue 30).
ANSWER_SHOWN = 200


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = (
            "key",
            "event",
            "status",
            "attempts",
            "status_code",
            "response_snippet",
            "error",
            "payload",
            "created_at",
            "last_attempt_at",
            "next_attempt_at",
        )
        read_only_fields = fields
        extra_kwargs = {
            "response_snippet": {
                "help_text": f"The start of the receiver's answer (at most {ANSWER_SHOWN} characters) for editors and "
                "owners; empty for viewers"
            }
        }

    def to_representation(self, delivery):
        data = super().to_representation(delivery)
        return {**data, "response_snippet": answer_shown(data["response_snippet"], self.context.get("show_answers"))}


def answer_shown(snippet: str, shown: bool | None) -> str:
    """What the caller reads of a receiver's answer: its start for an editor, nothing for a viewer."""
    return snippet[:ANSWER_SHOWN] if shown else ""


class AddressSerializer(serializers.Serializer):
    email = serializers.EmailField()
    confirmed = serializers.BooleanField(help_text="False: mailed a confirmation link; nothing is sent to it yet")


class ChannelSerializer(serializers.ModelSerializer):
    project = serializers.UUIDField(source="project.code", read_only=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=Event.choices), read_only=True)
    emails = serializers.SerializerMethodField(help_text="E-mail: each address and whether it is confirmed")
    has_token = serializers.SerializerMethodField(help_text="Grafana: whether a token is stored (never shown)")
    recent_deliveries = DeliverySerializer(
        source="log", many=True, read_only=True, help_text="The last ten deliveries, newest first"
    )

    class Meta:
        model = Channel
        fields = ("code", "project", "name", "kind", "events", "emails", "url", "payload_format", "enabled")
        fields = (*fields, "dashboard_uid", "panel_id", "has_token", "created_at", "recent_deliveries")
        read_only_fields = fields

    def to_representation(self, channel):
        data = super().to_representation(channel)
        # The log's answers: editors of this channel's team only (the list spans the caller's teams).
        shown = channel.project.team_id in self.context.get("writable_team_ids", ())
        for delivery in data["recent_deliveries"]:
            delivery["response_snippet"] = answer_shown(delivery["response_snippet"], shown)
        return data

    def get_has_token(self, channel) -> bool:
        return bool(channel.token)

    @extend_schema_field(AddressSerializer(many=True))
    def get_emails(self, channel) -> list[dict]:
        states = self.context.get("address_states", {})
        return [{"email": a, "confirmed": states.get(a.strip().lower(), False)} for a in channel.recipients]


class ChannelSecretSerializer(ChannelSerializer):
    secret = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="A webhook's or Grafana channel's signing secret (X-Plimsoll-Signature), shown this once; "
        "null otherwise",
    )

    class Meta(ChannelSerializer.Meta):
        fields = (*ChannelSerializer.Meta.fields, "secret")
        read_only_fields = fields


class ChannelWriteSerializer(StrictSerializer):
    project = serializers.UUIDField(required=False, help_text="To create: the project (a channel stays in it)")
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=Channel.Kind.choices, required=False, help_text="To create; it stays")
    events = serializers.ListField(child=serializers.ChoiceField(choices=Event.choices), allow_empty=False)
    emails = serializers.ListField(
        child=serializers.EmailField(), required=False, default=list, help_text="E-mail: the addresses"
    )
    url = serializers.CharField(
        max_length=500, required=False, default="", allow_blank=True, help_text="Webhook; Grafana: its base address"
    )
    payload_format = serializers.ChoiceField(
        choices=Channel.Format.choices, required=False, default="", allow_blank=True, help_text="Webhook"
    )
    token = serializers.CharField(
        max_length=500,
        required=False,
        default="",
        allow_blank=True,
        write_only=True,
        help_text="Grafana: a service account token, stored encrypted; absent or empty on a change: kept",
    )
    dashboard_uid = serializers.CharField(
        max_length=40, required=False, default="", allow_blank=True, help_text="Grafana: the dashboard (optional)"
    )
    panel_id = serializers.IntegerField(
        required=False, default=None, allow_null=True, help_text="Grafana: one panel of the dashboard (optional)"
    )
    enabled = serializers.BooleanField(default=True, help_text="Paused channels hear nothing")
    replace_secret = serializers.BooleanField(
        default=False, help_text="A webhook's change: a new signing secret, in the answer this once"
    )


class ChannelFilter(QueryParams):
    project = serializers.UUIDField(required=False, help_text="Channels of one project")


def _form_errors(form) -> dict:
    return {field: list(messages) for field, messages in form.errors.items()}


@extend_schema_view(
    list=extend_schema(
        summary="Notification channels of your teams' projects (never their secrets); filter by project",
        parameters=[ChannelFilter],
        responses={200: ChannelSerializer(many=True), **error_responses(400)},
    ),
    retrieve=extend_schema(
        summary="One notification channel, with its last deliveries",
        responses={200: ChannelSerializer, **error_responses(404)},
    ),
    **write_schemas(
        request=ChannelWriteSerializer,
        partial_request=ChannelWriteSerializer(partial=True),
        answer=ChannelSecretSerializer,
        create="Add an e-mail list (its addresses get a confirmation link) or a webhook (its secret shown once)",
        update="Change a channel (its kind and project stay; a webhook keeps its secret unless replace_secret)",
        partial_update="Change some fields of a channel (e.g. enabled: false to pause it)",
        destroy="Delete a channel and its delivery log",
    ),
)
class ChannelViewSet(
    PartialUpdateMixin, ListByCodes, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TeamScopedViewSet
):
    serializer_class = ChannelSerializer
    list_filter = ChannelFilter

    def safely_get_queryset(self):
        return selectors.channels_with_log(Channel.objects.select_related("project__team"))

    def get_serializer_context(self):
        context = super().get_serializer_context()
        user = self.request.user if self.request else None
        if user is not None and user.is_authenticated:
            # The delivery log's answers are for the teams where the caller edits (and a token's team only).
            context["writable_team_ids"] = set(
                self.scope_to_caller(access.writable_teams(user)).values_list("id", flat=True)
            )
            context["show_answers"] = True  # nested logs: ChannelSerializer blanks them per channel
        return context

    def get_serializer(self, *args, **kwargs):
        channels = args[0] if args else None
        if channels is not None:
            many = list(channels) if kwargs.get("many") else [channels]
            kwargs["context"] = {**self.get_serializer_context(), "address_states": addresses.address_states(many)}
        return super().get_serializer(*args, **kwargs)

    def create(self, request, *args, **kwargs):
        data = self._body()
        missing = {name: ["This field is required."] for name in ("project", "kind") if name not in data}
        if missing:
            raise Invalid(missing)
        project = self.get_scoped(Project.objects.select_related("team"), write=True, code=data["project"])
        form = ChannelForm(
            {
                "name": data["name"],
                "kind": data["kind"],
                "events": data["events"],
                "emails": ", ".join(data["emails"]),
                "url": data["url"],
                "payload_format": data["payload_format"],
                "token": data["token"],
                "dashboard_uid": data["dashboard_uid"],
                "panel_id": data["panel_id"] if data["panel_id"] is not None else "",
            }
        )
        if not form.is_valid():
            raise Invalid(_form_errors(form))
        clean = form.cleaned_data
        try:
            channel = services.channel_create(
                project=project,
                name=clean["name"],
                kind=clean["kind"],
                events=clean["events"],
                emails=clean["emails"],
                url=clean["url"],
                payload_format=clean["payload_format"],
                token=clean["token"],
                dashboard_uid=clean["dashboard_uid"],
                panel_id=clean["panel_id"],
                requested_by=request.user,
            )
        except services.ChannelError as exc:
            raise Invalid({"non_field_errors": [str(exc)]}) from None
        return Response(self._answer(channel, secret=channel.secret or None), status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        channel = self.get_scoped(self.safely_get_queryset(), write=True, code=kwargs["code"])
        data = self._body()
        stays = {
            "project": ("project", channel.project.code, "A channel stays in its project."),
            "kind": ("kind", channel.kind, "A channel's kind stays: add a new channel instead."),
        }
        wrong = {name: [message] for name, (key, value, message) in stays.items() if key in data and data[key] != value}
        if wrong:
            raise Invalid(wrong)
        form = ChannelEditForm(
            {
                "name": data["name"],
                "events": data["events"],
                "emails": ", ".join(data["emails"]),
                "url": data["url"],
                "payload_format": data["payload_format"],
                "token": data["token"],
                "dashboard_uid": data["dashboard_uid"],
                "panel_id": data["panel_id"] if data["panel_id"] is not None else "",
                "enabled": "on" if data["enabled"] else "",
                "replace_secret": "on" if data["replace_secret"] else "",
            },
            channel=channel,
        )
        if not form.is_valid():
            raise Invalid(_form_errors(form))
        clean = form.cleaned_data
        try:
            services.channel_update(
                channel=channel,
                name=clean["name"],
                events=clean["events"],
                emails=clean.get("emails", ""),
                url=clean.get("url", ""),
                payload_format=clean.get("payload_format", ""),
                token=clean.get("token", ""),
                dashboard_uid=clean.get("dashboard_uid", ""),
                panel_id=clean.get("panel_id"),
                enabled=clean["enabled"],
                replace_secret=clean.get("replace_secret", False),
                requested_by=request.user,
            )
        except services.ChannelError as exc:
            raise Invalid({"non_field_errors": [str(exc)]}) from None
        return Response(self._answer(channel, secret=channel.secret if clean.get("replace_secret") else None))

    def destroy(self, request, *args, **kwargs):
        channel = self.get_scoped(self.safely_get_queryset(), write=True, code=kwargs["code"])
        channel.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    def patch_base(self, channel) -> dict:
        return {
            "name": channel.name,
            "events": list(channel.events),
            "emails": channel.recipients,
            "url": channel.url,
            "payload_format": channel.payload_format if channel.kind == Channel.Kind.WEBHOOK else "",
            "dashboard_uid": channel.dashboard_uid,
            "panel_id": channel.panel_id,
            "enabled": channel.enabled,
        }

    def _body(self) -> dict:
        body = ChannelWriteSerializer(data=self.document())
        body.is_valid(raise_exception=True)
        return body.validated_data

    def _answer(self, channel: Channel, *, secret: str | None) -> dict:
        fresh = self.safely_get_queryset().get(pk=channel.pk)  # with its delivery log, as in the list
        fresh.secret = secret
        context = {**self.get_serializer_context(), "address_states": addresses.address_states([fresh])}
        return ChannelSecretSerializer(fresh, context=context).data

    @extend_schema(
        summary="A channel's last 100 deliveries, newest first, with each one's attempts and outcome",
        responses={200: DeliverySerializer(many=True), **error_responses(404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def deliveries(self, request, code=None):
        channel = self.get_scoped(Channel.objects.select_related("project__team"), code=code)
        log = channel.deliveries.order_by("-created_at", "-id")[:DELIVERY_LOG]
        shown = access.can_write(request.user, channel)
        return Response(DeliverySerializer(log, many=True, context={"show_answers": shown}).data)
